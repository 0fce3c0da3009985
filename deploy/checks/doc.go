// Package checks proves that Pinion's deployment files agree with the code,
// on a machine without a container engine or a cluster: the tests load
// docker-compose.yml with compose-go, render the kustomize base and overlay
// and decode every object strictly into the Kubernetes API types, parse the
// Dockerfile and the NATS configuration, and hold each against what the
// code reads (pkg/config.Vars) and uses (its NATS subjects, buckets and
// streams). The stack subpackage runs the services against servers
// configured by these files; cmd/pinion-probe is the health check the
// images carry.
package checks
