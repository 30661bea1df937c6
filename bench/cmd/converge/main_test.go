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
