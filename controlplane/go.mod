module github.com/z5labs/humus/controlplane

go 1.26.0
