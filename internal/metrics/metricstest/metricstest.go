// Package metricstest reads a metrics handler the way Prometheus does, for tests: scraped over
// HTTP and parsed with Prometheus' own text parser.
package metricstest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape is one scrape of h, by metric family name.
type Scrape map[string]*dto.MetricFamily

// Get scrapes h once; the test fails if the answer is not Prometheus' text format.
func Get(t testing.TB, h http.Handler) Scrape {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("the scrape is not Prometheus text: %v", err)
	}
	return families
}

// Value is the sample of family name whose labels include labels: a counter's or gauge's
// value, a histogram's sample count; -1 when there is no such sample.
func (s Scrape) Value(name string, labels map[string]string) float64 {
	for _, metric := range s[name].GetMetric() {
		if !Matches(metric, labels) {
			continue
		}
		switch {
		case metric.Counter != nil:
			return metric.GetCounter().GetValue()
		case metric.Gauge != nil:
			return metric.GetGauge().GetValue()
		case metric.Histogram != nil:
			return float64(metric.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

// Matches says whether m has every label of labels with its value.
func Matches(m *dto.Metric, labels map[string]string) bool {
	for k, v := range labels {
		found := false
		for _, l := range m.GetLabel() {
			found = found || l.GetName() == k && l.GetValue() == v
		}
		if !found {
			return false
		}
	}
	return true
}
