package delegatedauth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/delegatedauth"
)

// fakeAPIServer answers TokenReviews and SubjectAccessReviews as an API
// server would: the token "reader-token" is the user reader, allowed to
// get /metrics; "nobody-token" is the user nobody, allowed nothing; any
// other token is not authenticated. It counts the reviews and remembers the
// last SubjectAccessReview's spec.
type fakeAPIServer struct {
	mu       sync.Mutex
	reviews  map[string]int
	lastSAR  authzv1.SubjectAccessReviewSpec
	failSARs bool
	latency  time.Duration // how long each review takes, one at a time
}

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.reviews[r.URL.Path]++
	f.mu.Unlock()
	time.Sleep(f.latency) // an API server's latency, not a wait for an event
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		var tr authnv1.TokenReview
		if err := decode(r, &tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch tr.Spec.Token {
		case "reader-token":
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "reader", Groups: []string{"scrapers"}}}
		case "nobody-token":
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "nobody"}}
		default:
			tr.Status = authnv1.TokenReviewStatus{Error: "token not valid"}
		}
		tr.Kind, tr.APIVersion = "TokenReview", "authentication.k8s.io/v1"
		_ = json.NewEncoder(w).Encode(tr)
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		if f.failSARs {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the review is malformed","code":400}`)
			return
		}
		var sar authzv1.SubjectAccessReview
		if err := decode(r, &sar); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.lastSAR = sar.Spec
		nr := sar.Spec.NonResourceAttributes
		allowed := sar.Spec.User == "reader" && sar.Spec.ResourceAttributes == nil &&
			nr != nil && nr.Path == "/metrics" && nr.Verb == "get"
		sar.Status = authzv1.SubjectAccessReviewStatus{Allowed: allowed}
		sar.Kind, sar.APIVersion = "SubjectAccessReview", "authorization.k8s.io/v1"
		_ = json.NewEncoder(w).Encode(sar)
	default:
		http.NotFound(w, r)
	}
}

// decode decodes a request's body in whichever encoding client-go sent
// it (JSON or protobuf), as the API server does.
func decode(r *http.Request, into runtime.Object) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	_, _, err = scheme.Codecs.UniversalDeserializer().Decode(b, nil, into)
	return err
}

func (f *fakeAPIServer) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reviews[path]
}

const (
	tokenReviews = "/apis/authentication.k8s.io/v1/tokenreviews"
	accessReview = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
)

// serve returns a server of the metrics handler behind Handler, reviewing
// with api through a kube.Client, and the handler's telemetry.
func serve(t *testing.T, api *fakeAPIServer) (*httptest.Server, *humustest.Telemetry) {
	t.Helper()
	apiSrv := httptest.NewTLSServer(api)
	t.Cleanup(apiSrv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(apiSrv.Certificate())
	tel := humustest.NewTelemetry(t)
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: tel.Telemetry}
	c, err := kube.NewClient(s, kube.Connection{
		Server: strings.TrimPrefix(apiSrv.URL, "https://"),
		TLS:    &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		Token:  func(context.Context) (string, error) { return "the-controllers-token", nil },
	})
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The caller's token goes no further than the reviews.
		require.Empty(t, r.Header.Get("Authorization"))
		_, _ = io.WriteString(w, "# the metrics\n")
	})
	h, err := delegatedauth.Handler(s, c, metrics)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, tel
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestHandlerLetsInOnlyWhomTheAPIServerAuthenticatesAndAuthorizes(t *testing.T) {
	// Registered first, so it runs after the servers' Cleanups.
	running := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, running) })
	api := &fakeAPIServer{reviews: map[string]int{}}
	srv, tel := serve(t, api)
	defer http.DefaultClient.CloseIdleConnections()

	code, body := get(t, srv.URL+"/metrics", "")
	require.Equal(t, http.StatusUnauthorized, code, body)
	require.Equal(t, 0, api.count(tokenReviews), "no token, no review")

	code, body = get(t, srv.URL+"/metrics", "stolen-token")
	require.Equal(t, http.StatusUnauthorized, code, body)

	code, body = get(t, srv.URL+"/metrics", "nobody-token")
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, "Forbidden: user \"nobody\" may not get /metrics\n", body)

	code, body = get(t, srv.URL+"/metrics", "reader-token")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "# the metrics\n", body)
	api.mu.Lock()
	sar := api.lastSAR
	api.mu.Unlock()
	require.Equal(t, "reader", sar.User)
	require.Contains(t, sar.Groups, "scrapers")
	require.Contains(t, sar.Groups, "system:authenticated", "the authenticator adds the group the API server does")
	require.Equal(t, &authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}, sar.NonResourceAttributes)

	t.Run("TheReviewsAreCached", func(t *testing.T) {
		tokens, sars := api.count(tokenReviews), api.count(accessReview)
		for range 3 {
			code, _ := get(t, srv.URL+"/metrics", "reader-token")
			require.Equal(t, http.StatusOK, code)
			code, _ = get(t, srv.URL+"/metrics", "nobody-token")
			require.Equal(t, http.StatusForbidden, code)
		}
		require.Equal(t, tokens, api.count(tokenReviews))
		require.Equal(t, sars, api.count(accessReview))
	})

	t.Run("TheVerbIsTheMethodAndThePathIsTheRequests", func(t *testing.T) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/metrics", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer reader-token")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		code, _ := get(t, srv.URL+"/debug", "reader-token")
		require.Equal(t, http.StatusForbidden, code)
	})

	t.Run("TheReviewsAreNotRootSpans", func(t *testing.T) {
		require.Positive(t, api.count(tokenReviews))
		require.Empty(t, tel.Spans(), "a scrape's reviews, in a context with no span, are background requests")
	})
}

func TestHandlerAnswers500WhenTheAccessReviewFails(t *testing.T) {
	api := &fakeAPIServer{reviews: map[string]int{}, failSARs: true}
	srv, tel := serve(t, api)
	defer http.DefaultClient.CloseIdleConnections()
	code, body := get(t, srv.URL+"/metrics", "reader-token")
	require.Equal(t, http.StatusInternalServerError, code)
	require.Equal(t, "Internal Server Error: the authorization review failed\n", body)
	require.NotEmpty(t, tel.Records(), "the failure is logged")
}

func TestHandlerNamesEveryNilArgument(t *testing.T) {
	_, err := delegatedauth.Handler(nil, nil, nil)
	require.EqualError(t, err, "delegatedauth: Handler was given a nil Setup\n"+
		"delegatedauth: Handler was given a nil Client: make it with kube.NewClient\n"+
		"delegatedauth: Handler was given a nil handler")
}

func TestConcurrentRequestsWithOneNewTokenSendOneReviewOfEachKind(t *testing.T) {
	// A scrape's burst, or many scrapers with one token: without merging,
	// 50 requests with one new token sent 47 TokenReviews and 35
	// SubjectAccessReviews. Each request either joins the review in
	// flight or finds its answer cached.
	api := &fakeAPIServer{reviews: map[string]int{}, latency: 200 * time.Millisecond}
	srv, _ := serve(t, api)
	defer http.DefaultClient.CloseIdleConnections()
	var wg sync.WaitGroup
	codes := make([]int, 50)
	for i := range codes {
		wg.Go(func() { codes[i], _ = get(t, srv.URL+"/metrics", "reader-token") })
	}
	wg.Wait()
	for i, code := range codes {
		require.Equal(t, http.StatusOK, code, "request %d", i)
	}
	require.Equal(t, 1, api.count(tokenReviews), "TokenReviews")
	require.Equal(t, 1, api.count(accessReview), "SubjectAccessReviews")
}
