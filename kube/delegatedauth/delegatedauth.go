// Package delegatedauth lets into an HTTP handler, such as a controller's
// /metrics, only the callers the API server authenticates and authorizes:
// it delegates both decisions to the API server, through a kube.Client, as
// kubebuilder's scaffold does for its metrics endpoint by default
// (controller-runtime's pkg/metrics/filters.WithAuthenticationAndAuthorization)
// and as the API server's own aggregated servers do.
//
// It is built on k8s.io/apiserver's delegating authenticator and
// authorizer (pkg/authentication/authenticatorfactory and
// pkg/authorization/authorizerfactory), with their caches; kube imports it
// only from this package, so an App that doesn't use it doesn't link it.
package delegatedauth

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/bridges/otelslog"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube"
)

// The reviews' timeouts, caches and retries. They are controller-runtime's
// (pkg/metrics/filters), which are the API server's own defaults for its
// delegated authentication and authorization (k8s.io/apiserver's
// pkg/server/options: --authentication-token-webhook-cache-ttl, 10s
// timeouts, DefaultAuthWebhookRetryBackoff), but for the token cache,
// which is a minute rather than ten seconds.
const (
	// TokenCacheTTL is how long a TokenReview's answer, for or against a
	// token, is kept: a scraper that presents the same token every 15 or
	// 30 seconds costs one TokenReview a minute.
	TokenCacheTTL = time.Minute
	// AllowCacheTTL and DenyCacheTTL are how long a SubjectAccessReview's
	// allow and deny are kept: a permission granted shows after up to
	// DenyCacheTTL, one withdrawn after up to AllowCacheTTL.
	AllowCacheTTL = 5 * time.Minute
	DenyCacheTTL  = 30 * time.Second
	// ReviewTimeout bounds a TokenReview.
	ReviewTimeout = 10 * time.Second
)

// retryBackoff is how a review that fails (for example, with the API server
// unreachable) is retried: k8s.io/apiserver's
// options.DefaultAuthWebhookRetryBackoff, 0.5s, growing by 1.5, five times.
func retryBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// Handler returns next behind the API server's authentication and
// authorization, through c, whose own credentials (such as its pod's
// service account) must allow creating tokenreviews
// (authentication.k8s.io) and subjectaccessreviews (authorization.k8s.io).
// For each request, as the API server's own filters decide
// (k8s.io/apiserver's pkg/endpoints/filters):
//
//   - its bearer token (the Authorization header's) is sent in a
//     TokenReview; with no token, or one the API server doesn't
//     authenticate, the answer is 401 Unauthorized. No anonymous caller is
//     let in.
//   - the user the review names is sent in a SubjectAccessReview for the
//     request's method, in lower case, as the verb, on its path as a
//     non-resource URL: a GET of /metrics needs a rule such as
//     `nonResourceURLs: ["/metrics"], verbs: ["get"]`. Denied, the answer is
//     403 Forbidden; a review that fails is 500 Internal Server Error.
//   - let in, the request reaches next without its Authorization header.
//
// The answers are cached for TokenCacheTTL, AllowCacheTTL and
// DenyCacheTTL, keyed by token and by user, verb and path. The reviews'
// requests are traced as the Client's others are, but none in a context
// with no span, as a scrape's are (see the kube package's transport). Why a
// caller was refused, and a review's error, are logged at DEBUG and ERROR
// with s.Telemetry's LoggerProvider; the response says only the status and,
// for a 403, the user.
//
// It returns an error for a nil s, c or next. Two things of
// k8s.io/apiserver's own are global, as they are in controller-runtime's
// filter: it registers its reviews' metrics in component-base's
// legacyregistry, a package-level registry that nothing of humus serves,
// and a review that fails also writes one line with klog's global logger,
// to the process's standard error.
func Handler(s *humus.Setup, c *kube.Client, next http.Handler) (http.Handler, error) {
	var errs []error
	if s == nil {
		errs = append(errs, errors.New("delegatedauth: Handler was given a nil Setup"))
	}
	if c == nil {
		errs = append(errs, errors.New("delegatedauth: Handler was given a nil Client: make it with kube.NewClient"))
	}
	if next == nil {
		errs = append(errs, errors.New("delegatedauth: Handler was given a nil handler"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	authn, err := authenticationv1.NewForConfig(c.Config())
	if err != nil {
		return nil, fmt.Errorf("delegatedauth: the TokenReview client: %w", err)
	}
	authz, err := authorizationv1.NewForConfig(c.Config())
	if err != nil {
		return nil, fmt.Errorf("delegatedauth: the SubjectAccessReview client: %w", err)
	}
	authn2, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:  authn,
		TokenAccessReviewTimeout: ReviewTimeout,
		WebhookRetryBackoff:      retryBackoff(),
		CacheTTL:                 TokenCacheTTL,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegatedauth: the authenticator: %w", err)
	}
	authz2, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authz,
		AllowCacheTTL:             AllowCacheTTL,
		DenyCacheTTL:              DenyCacheTTL,
		WebhookRetryBackoff:       retryBackoff(),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegatedauth: the authorizer: %w", err)
	}
	log := otelslog.NewLogger("github.com/z5labs/humus/kube/delegatedauth",
		otelslog.WithLoggerProvider(s.Telemetry.WithNoops().LoggerProvider))
	return &handler{authn: authn2, authz: authz2, next: next, log: log}, nil
}

type handler struct {
	authn authenticator.Request
	authz authorizer.Authorizer
	next  http.Handler
	log   *slog.Logger
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	res, ok, err := h.authn.AuthenticateRequest(r)
	if err != nil || !ok {
		// The API server answers 401 to both: no token, and a token it
		// couldn't review (filters.WithAuthentication).
		if err != nil {
			h.log.DebugContext(ctx, "delegatedauth: unauthenticated", "path", r.URL.Path, "error", err.Error())
		}
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	attrs := authorizer.AttributesRecord{
		User:            res.User,
		Verb:            strings.ToLower(r.Method),
		Path:            r.URL.Path,
		ResourceRequest: false,
	}
	decision, reason, err := h.authz.Authorize(ctx, attrs)
	name := res.User.GetName()
	if err != nil {
		h.log.ErrorContext(ctx, "delegatedauth: a SubjectAccessReview failed", "user", name, "path", r.URL.Path, "error", err.Error())
		http.Error(w, "Internal Server Error: the authorization review failed", http.StatusInternalServerError)
		return
	}
	if decision != authorizer.DecisionAllow {
		h.log.DebugContext(ctx, "delegatedauth: forbidden", "user", name, "verb", attrs.Verb, "path", r.URL.Path, "reason", reason)
		http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s %s", name, attrs.Verb, r.URL.Path), http.StatusForbidden)
		return
	}
	h.next.ServeHTTP(w, r)
}
