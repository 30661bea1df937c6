package main

import (
	"reflect"
	"testing"
)

func TestIntsReadsCommaSeparatedCounts(t *testing.T) {
	got, err := ints("-n", "1000, 5000,10000")
	if err != nil || !reflect.DeepEqual(got, []int{1000, 5000, 10000}) {
		t.Fatalf("ints = %v, %v; want [1000 5000 10000], nil", got, err)
	}
}

func TestIntsNamesEveryItemThatIsntAPositiveWholeNumber(t *testing.T) {
	_, err := ints("-n", "5,abc,0,,99999999999999999999,-3")
	want := `-n: "abc" is not a positive whole number
-n: "0" is not a positive whole number
-n: an empty item in "5,abc,0,,99999999999999999999,-3" (a stray comma?)
-n: 99999999999999999999 is too large
-n: "-3" is not a positive whole number`
	if err == nil || err.Error() != want {
		t.Fatalf("ints error = %v; want\n%s", err, want)
	}
}

func TestTheReportGivesKubeOverEachOtherPeer(t *testing.T) {
	runs := []Run{
		{Peer: peerKube, Objects: 10, Workers: 4, ConvergeSeconds: 2, CPUSeconds: 1, SyncedSeconds: 0.5},
		{Peer: peerClientGo, Objects: 10, Workers: 4, ConvergeSeconds: 4, CPUSeconds: 2, SyncedSeconds: 1},
		{Peer: peerFloor, Objects: 10, Workers: 4, ConvergeSeconds: 1, CPUSeconds: 0.5},
		{Peer: peerCR, Objects: 10, Workers: 4, Error: "failed"},
	}
	rep := newReport(runs, "")
	if len(rep.Ratios) != 1 {
		t.Fatalf("ratios = %+v; want one N and W", rep.Ratios)
	}
	ra := rep.Ratios[0]
	if ra.VsClientGo["converge_seconds"] != 0.5 || ra.VsClientGo["cpu_seconds"] != 0.5 || ra.VsClientGo["synced_seconds"] != 0.5 {
		t.Errorf("kube over client-go = %v; want converge, CPU and synced 0.5", ra.VsClientGo)
	}
	if ra.VsFloor["converge_seconds"] != 2 || ra.VsFloor["cpu_seconds"] != 2 {
		t.Errorf("kube over floor = %v; want converge and CPU 2", ra.VsFloor)
	}
	if _, ok := ra.VsFloor["synced_seconds"]; ok {
		t.Errorf("kube over floor has synced_seconds, which the floor doesn't say")
	}
	if len(ra.VsCR) != 0 {
		t.Errorf("kube over controller-runtime = %v; want none (its run failed)", ra.VsCR)
	}
}
