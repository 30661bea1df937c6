// Package config reads an App's configuration into a value of the App's own
// type, from sources such as the Host's environment, and reports every
// missing or malformed value in one error.
//
//	settings, err := config.Struct(func(r *config.Resolver) Settings {
//		env := func(name string) config.Source { return config.Env(s.Host, name) }
//		return Settings{
//			Namespace: r.Get(env("POD_NAMESPACE")),
//			Workers:   r.IntOr(env("WORKERS"), 2),
//			Resync:    r.DurationOr(env("RESYNC"), 10*time.Hour),
//		}
//	}).Read(ctx)
package config

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/z5labs/humus"
)

// Source is where one value comes from.
type Source interface {
	// Lookup returns the value and whether it is set. An error means the
	// source could not be read at all.
	Lookup(ctx context.Context) (value string, ok bool, err error)

	// String names the source in errors, such as
	// "environment variable POD_NAME".
	String() string
}

// Env returns the Source of the environment variable name, read with
// h.LookupEnv. A Host with no LookupEnv has no variable set.
func Env(h humus.Host, name string) Source { return env{h.LookupEnv, name} }

type env struct {
	lookup func(string) (string, bool)
	name   string
}

func (e env) Lookup(context.Context) (string, bool, error) {
	if e.lookup == nil {
		return "", false, nil
	}
	v, ok := e.lookup(e.name)
	return v, ok, nil
}

func (e env) String() string { return "environment variable " + e.name }

// Reader reads a T with the function given to Struct.
type Reader[T any] struct {
	build func(r *Resolver) T
}

// Struct returns a Reader that builds a T with build, which takes each value
// from a Resolver.
func Struct[T any](build func(r *Resolver) T) Reader[T] {
	return Reader[T]{build: build}
}

// Read calls the build function given to Struct, and returns what it built.
// If any value it asked the Resolver for was missing or malformed, or its
// source failed, Read returns the zero T and one error naming every such
// value (errors.Join), each starting with "config: " and the source's name.
// A Reader whose build function is nil, such as the zero Reader, returns an
// error saying so.
func (rd Reader[T]) Read(ctx context.Context) (T, error) {
	if rd.build == nil {
		var zero T
		return zero, errors.New("config: Read: the function given to Struct is nil")
	}
	r := &Resolver{ctx: ctx}
	v := rd.build(r)
	if err := errors.Join(r.errs...); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// Resolver hands a build function its values, and keeps an error for each
// one that is missing or malformed, for Read to return. A set but empty
// value counts as not set. Each getter returns the zero value, or the
// default it is given, when it can't return the source's value.
type Resolver struct {
	ctx  context.Context
	errs []error
}

// lookup returns src's value when it is set and not empty. A nil src is an
// error.
func (r *Resolver) lookup(src Source) (string, bool) {
	if src == nil {
		r.errs = append(r.errs, errors.New("config: a getter was given a nil Source"))
		return "", false
	}
	v, ok, err := src.Lookup(r.ctx)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("config: %s: %w", src, err))
		return "", false
	}
	return v, ok && v != ""
}

func (r *Resolver) missing(src Source) {
	if src == nil {
		return // lookup reported it
	}
	r.errs = append(r.errs, fmt.Errorf("config: %s is required but not set", src))
}

// Get returns src's value, which is required: unset or empty, it is an
// error.
func (r *Resolver) Get(src Source) string {
	v, ok := r.lookup(src)
	if !ok {
		r.missing(src)
	}
	return v
}

// GetOr returns src's value, or def when src is unset or empty.
func (r *Resolver) GetOr(src Source, def string) string {
	if v, ok := r.lookup(src); ok {
		return v
	}
	return def
}

// Int returns src's value as a base-10 int (strconv.Atoi), which is
// required: unset, empty or malformed, it is an error.
func (r *Resolver) Int(src Source) int {
	v, ok := r.lookup(src)
	if !ok {
		r.missing(src)
		return 0
	}
	return r.parseInt(src, v, 0)
}

// IntOr returns src's value as a base-10 int (strconv.Atoi), or def when
// src is unset or empty. A malformed value is an error.
func (r *Resolver) IntOr(src Source, def int) int {
	v, ok := r.lookup(src)
	if !ok {
		return def
	}
	return r.parseInt(src, v, def)
}

func (r *Resolver) parseInt(src Source, v string, def int) int {
	n, err := strconv.Atoi(v)
	if errors.Is(err, strconv.ErrRange) {
		r.errs = append(r.errs, fmt.Errorf("config: %s: %q is out of the range of an int", src, v))
		return def
	}
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("config: %s: %q is not an integer", src, v))
		return def
	}
	return n
}

// BoolOr returns src's value as a bool, or def when src is unset or
// empty. It takes what strconv.ParseBool takes: 1, t, T, TRUE, true, True,
// 0, f, F, FALSE, false, False. Anything else is an error.
func (r *Resolver) BoolOr(src Source, def bool) bool {
	v, ok := r.lookup(src)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("config: %s: %q is not a boolean, such as \"true\" or \"false\"", src, v))
		return def
	}
	return b
}

// Duration returns src's value as a time.Duration, such as "15s" or
// "1h30m" (time.ParseDuration), which is required: unset, empty or
// malformed, it is an error.
func (r *Resolver) Duration(src Source) time.Duration {
	v, ok := r.lookup(src)
	if !ok {
		r.missing(src)
		return 0
	}
	return r.parseDuration(src, v, 0)
}

// DurationOr returns src's value as a time.Duration (time.ParseDuration), or
// def when src is unset or empty. A malformed value is an error.
func (r *Resolver) DurationOr(src Source, def time.Duration) time.Duration {
	v, ok := r.lookup(src)
	if !ok {
		return def
	}
	return r.parseDuration(src, v, def)
}

func (r *Resolver) parseDuration(src Source, v string, def time.Duration) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("config: %s: %q is not a duration, such as \"15s\" or \"1h30m\"", src, v))
		return def
	}
	return d
}
