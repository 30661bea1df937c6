package main

import (
	"reflect"
	"testing"
)

func TestParseLabelsReadsQuotedAndEscapedValues(t *testing.T) {
	got := parseLabels(`code="201",component="apiserver",dry_run="",group="apps",resource="deployments",subresource="",verb="APPLY",x="a\"b"`)
	want := map[string]string{"code": "201", "component": "apiserver", "dry_run": "", "group": "apps",
		"resource": "deployments", "subresource": "", "verb": "APPLY", "x": `a"b`}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseLabels = %v, want %v", got, want)
	}
}

func TestRequestsCountWritesAndStatusWrites(t *testing.T) {
	before := Requests{"APPLY deployments": 1, "LIST memcacheds": 1}
	after := Requests{"APPLY deployments": 11, "LIST memcacheds": 1, "APPLY memcacheds/status": 10,
		"UPDATE memcacheds/status": 5, "GET memcacheds": 3, "UPDATE leases": 2}
	d := after.sub(before)
	if _, ok := d["LIST memcacheds"]; ok {
		t.Errorf("sub kept an unchanged key: %v", d)
	}
	if got := d.total(); got != 30 {
		t.Errorf("total = %v, want 30", got)
	}
	if got := d.writes(); got != 27 {
		t.Errorf("writes = %v, want 27", got)
	}
	if got := d.statusWrites(); got != 15 {
		t.Errorf("statusWrites = %v, want 15", got)
	}
}
