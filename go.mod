module github.com/efs-csi/efs-csi-driver

go 1.26.0
