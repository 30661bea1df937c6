package main

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"

	"github.com/z5labs/humus"
)

// TestPrinterPrefixesEveryLine: a record whose error spans lines (as
// errors.Join's does) prints each of its lines under the "│ app" prefix.
func TestPrinterPrefixesEveryLine(t *testing.T) {
	var out bytes.Buffer
	p := &logPrinter{out: &out, min: log.SeverityInfo}
	tel, err := p.telemetry(context.Background(), humus.Host{})
	if err != nil {
		t.Fatal(err)
	}
	var r log.Record
	r.SetSeverity(log.SeverityError)
	r.SetSeverityText("ERROR")
	r.SetBody(attribute.StringValue("reconcile failed"))
	r.AddAttributes(attribute.String("error", errors.Join(errors.New("first"), errors.New("second")).Error()))
	tel.LoggerProvider.Logger("test").Emit(context.Background(), r)
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "   │ app ERROR reconcile failed error=first\n   │ app       second\n"
	if got := out.String(); got != want {
		t.Fatalf("printed\n%q\nwant\n%q", got, want)
	}
}
