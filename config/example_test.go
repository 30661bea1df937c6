package config_test

import (
	"context"
	"fmt"
	"time"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/config"
)

func ExampleStruct() {
	environment := map[string]string{"POD_NAMESPACE": "system", "WORKERS": "four"}
	host := humus.Host{LookupEnv: func(k string) (string, bool) { v, ok := environment[k]; return v, ok }}
	env := func(name string) config.Source { return config.Env(host, name) }

	type settings struct {
		Namespace string
		Identity  string
		Workers   int
		Lease     time.Duration
	}
	_, err := config.Struct(func(r *config.Resolver) settings {
		return settings{
			Namespace: r.Get(env("POD_NAMESPACE")),
			Identity:  r.Get(env("POD_NAME")),
			Workers:   r.IntOr(env("WORKERS"), 2),
			Lease:     r.DurationOr(env("LEASE_DURATION"), 15*time.Second),
		}
	}).Read(context.Background())
	fmt.Println(err)
	// Output:
	// config: environment variable POD_NAME is required but not set
	// config: environment variable WORKERS: "four" is not an integer
}
