// Package stack runs Pinion's processes against servers configured by the
// deployment files, where a container engine is not needed: a NATS server
// started from deploy/docker/nats.conf (its users, permissions and limits)
// with each process connecting as its own user with the environment
// docker-compose.yml gives it, and an embedded FerretDB in place of the
// MongoDB container. The main user story must pass without one permission
// violation. With a container engine, containers_test.go runs the story
// against real mongo and nats images as well.
package stack
