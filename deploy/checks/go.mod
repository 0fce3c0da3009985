module github.com/pinion-health/pinion/deploy/checks

go 1.26.0

require github.com/pinion-health/pinion/pkg v0.0.0

require (
	github.com/blang/semver/v4 v4.0.0 // indirect
	github.com/compose-spec/compose-go/v2 v2.16.2 // indirect
	k8s.io/api v0.37.2 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	sigs.k8s.io/kustomize/api v0.21.2 // indirect
	sigs.k8s.io/kustomize/kyaml v0.21.2 // indirect
)

replace github.com/pinion-health/pinion/pkg => ../../pkg
