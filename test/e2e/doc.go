// Package e2e holds the end-to-end suite (build tag e2e): a real etcd, kube-apiserver,
// kube-controller-manager and csi-provisioner on loopback drive the driver and the EFS
// emulator. It is a Go module of its own so that client-go's dependencies stay out of the
// driver's go.mod. Run it with `make e2e`; see suite_test.go for the environment knobs.
package e2e
