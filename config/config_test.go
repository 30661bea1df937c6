package config_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus/config"
	"github.com/z5labs/humus/humustest"
)

type settings struct {
	Host      string
	Port      string
	Namespace string
	Workers   int
	Burst     int
	Lease     time.Duration
	Renew     time.Duration
}

func read(t *testing.T, h *humustest.Host) (settings, error) {
	env := func(name string) config.Source { return config.Env(h.Host, name) }
	return config.Struct(func(r *config.Resolver) settings {
		return settings{
			Host:      r.Get(env("KUBERNETES_SERVICE_HOST")),
			Port:      r.GetOr(env("KUBERNETES_SERVICE_PORT"), "443"),
			Namespace: r.Get(env("POD_NAMESPACE")),
			Workers:   r.IntOr(env("WORKERS"), 2),
			Burst:     r.Int(env("BURST")),
			Lease:     r.DurationOr(env("LEASE_DURATION"), 15*time.Second),
			Renew:     r.Duration(env("RENEW_DEADLINE")),
		}
	}).Read(t.Context())
}

func TestReadFillsEveryValueAndDefault(t *testing.T) {
	h := humustest.NewHost(t)
	h.SetEnv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	h.SetEnv("POD_NAMESPACE", "system")
	h.SetEnv("BURST", "20")
	h.SetEnv("RENEW_DEADLINE", "10s")
	h.SetEnv("WORKERS", "") // empty counts as unset

	got, err := read(t, h)

	require.NoError(t, err)
	require.Equal(t, settings{
		Host: "10.0.0.1", Port: "443", Namespace: "system",
		Workers: 2, Burst: 20, Lease: 15 * time.Second, Renew: 10 * time.Second,
	}, got)
}

func TestReadReportsEveryMissingAndMalformedValueInOneError(t *testing.T) {
	h := humustest.NewHost(t)
	h.SetEnv("POD_NAMESPACE", "system")
	h.SetEnv("WORKERS", "two")
	h.SetEnv("BURST", "1.5")
	h.SetEnv("LEASE_DURATION", "15")

	got, err := read(t, h)

	require.Equal(t, settings{}, got)
	require.EqualError(t, err, `config: environment variable KUBERNETES_SERVICE_HOST is required but not set
config: environment variable WORKERS: "two" is not an integer
config: environment variable BURST: "1.5" is not an integer
config: environment variable LEASE_DURATION: "15" is not a duration, such as "15s" or "1h30m"
config: environment variable RENEW_DEADLINE is required but not set`)
}

type failing struct{}

func (failing) Lookup(context.Context) (string, bool, error) {
	return "", false, errors.New("vault sealed")
}
func (failing) String() string { return "secret db-password" }

func TestReadReportsASourceThatFails(t *testing.T) {
	_, err := config.Struct(func(r *config.Resolver) string {
		return r.GetOr(failing{}, "x")
	}).Read(t.Context())
	require.EqualError(t, err, "config: secret db-password: vault sealed")
}

func TestReadOfANilBuildFunctionIsAnError(t *testing.T) {
	var v int
	var err error
	require.NotPanics(t, func() { v, err = config.Struct[int](nil).Read(t.Context()) })
	require.EqualError(t, err, "config: Read: the function given to Struct is nil")
	require.Zero(t, v)
	_, err = config.Reader[int]{}.Read(t.Context())
	require.Error(t, err)
}

func TestANilSourceIsAnError(t *testing.T) {
	var err error
	require.NotPanics(t, func() {
		_, err = config.Struct(func(r *config.Resolver) int { return r.Int(nil) + r.IntOr(nil, 1) }).Read(t.Context())
	})
	require.EqualError(t, err, "config: a getter was given a nil Source\nconfig: a getter was given a nil Source")
}

func TestOddValuesAreNamedClearly(t *testing.T) {
	h := humustest.NewHost(t)
	h.SetEnv("HUGE", "99999999999999999999")
	h.SetEnv("SPACED", " 5 ")
	h.SetEnv("NEGATIVE", "-5s")
	env := func(name string) config.Source { return config.Env(h.Host, name) }
	var d time.Duration
	_, err := config.Struct(func(r *config.Resolver) int {
		d = r.Duration(env("NEGATIVE"))
		return r.Int(env("HUGE")) + r.Int(env("SPACED"))
	}).Read(t.Context())
	require.EqualError(t, err, `config: environment variable HUGE: "99999999999999999999" is out of the range of an int`+"\n"+
		`config: environment variable SPACED: " 5 " is not an integer`)
	require.Equal(t, -5*time.Second, d, "a negative duration is read as it is, for the value's own check")
}

func TestBoolOrReadsWhatParseBoolTakesAndNamesAnythingElse(t *testing.T) {
	h := humustest.NewHost(t)
	h.SetEnv("ON", "true")
	h.SetEnv("OFF", "0")
	h.SetEnv("EMPTY", "")
	env := func(name string) config.Source { return config.Env(h.Host, name) }
	type flags struct{ On, Off, Empty, Unset bool }
	got, err := config.Struct(func(r *config.Resolver) flags {
		return flags{
			On:    r.BoolOr(env("ON"), false),
			Off:   r.BoolOr(env("OFF"), true),
			Empty: r.BoolOr(env("EMPTY"), true),
			Unset: r.BoolOr(env("UNSET"), true),
		}
	}).Read(t.Context())
	require.NoError(t, err)
	require.Equal(t, flags{On: true, Off: false, Empty: true, Unset: true}, got)

	h.SetEnv("ON", "yes")
	_, err = config.Struct(func(r *config.Resolver) bool { return r.BoolOr(env("ON"), false) }).Read(t.Context())
	require.EqualError(t, err, `config: environment variable ON: "yes" is not a boolean, such as "true" or "false"`)
}
