//go:build tools

// Package deps pins modules the project uses before any package imports them,
// so `go mod tidy` keeps them. Removed once every one is imported for real.
package deps

import (
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "github.com/aws/aws-sdk-go-v2/service/efs"
	_ "github.com/aws/smithy-go"
	_ "github.com/container-storage-interface/spec/lib/go/csi"
	_ "github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "go.etcd.io/bbolt"
	_ "golang.org/x/sys/unix"
	_ "golang.org/x/time/rate"
	_ "google.golang.org/grpc"
)
