module github.com/z5labs/humus/bench

go 1.26.0
