// Package delegatedauth lets into an HTTP handler, such as a controller's
// /metrics, only the callers the API server authenticates and authorizes:
// it delegates both decisions to the API server, through a kube.Client, as
// kubebuilder's scaffold does for its metrics endpoint by default
// (controller-runtime's pkg/metrics/filters.WithAuthenticationAndAuthorization)
// and as the API server's own aggregated servers do.
//
// It sends the reviews with client-go's typed clients, and keeps their
// answers in apimachinery's LRUExpireCache, rather than use
// k8s.io/apiserver's delegating authenticator and authorizer, which
// controller-runtime's filter uses: those added 135 packages and 8.2 MB
// (15%) to the stripped Memcached example binary (cel-go, the API server's
// webhook and tracing packages, an OTLP gRPC exporter), register metrics
// in a package-level registry, and write a failed review to the process's
// standard error with klog's global logger. What they would add beyond
// this package, a retry of a failed review, the next scrape does.
package delegatedauth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/internal/logattrs"
)

// The reviews' timeout and caches. They are controller-runtime's
// (pkg/metrics/filters), which are the API server's own defaults for its
// delegated authentication and authorization (k8s.io/apiserver's
// pkg/server/options: --authentication-token-webhook-cache-ttl, 10s
// timeouts), but for the token cache, which is a minute rather than ten
// seconds.
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
	// ReviewTimeout bounds each review.
	ReviewTimeout = 10 * time.Second
	// CacheSize is how many answers each cache keeps, the least recently
	// used dropped first.
	CacheSize = 4096
)

// authenticatedGroup is the group the API server adds to every user it
// authenticates (k8s.io/apiserver's group.NewAuthenticatedGroupAdder), and
// so to the user a SubjectAccessReview names.
const authenticatedGroup = "system:authenticated"

// Handler returns next behind the API server's authentication and
// authorization, through c, whose own credentials (such as its pod's
// service account) must allow creating tokenreviews
// (authentication.k8s.io) and subjectaccessreviews (authorization.k8s.io).
// For each request, as the API server's own filters decide
// (k8s.io/apiserver's pkg/endpoints/filters):
//
//   - its bearer token (the Authorization header's, "Bearer <token>") is
//     sent in a TokenReview, for the API server's own audiences; with no
//     token, one the API server doesn't authenticate, or a review that
//     fails, the answer is 401 Unauthorized. No anonymous caller is let in.
//   - the user the review names, with the group system:authenticated, is
//     sent in a SubjectAccessReview for the request's method, in lower
//     case, as the verb, on its path as a non-resource URL: a GET of
//     /metrics needs a rule such as
//     `nonResourceURLs: ["/metrics"], verbs: ["get"]`. Denied, the answer is
//     403 Forbidden; a review that fails is 500 Internal Server Error.
//   - let in, the request reaches next without its Authorization header.
//
// Each review is bounded by ReviewTimeout, and not retried: the caller's
// next request tries again. The answers are cached, up to CacheSize of
// each: a token's (authenticated or not) for TokenCacheTTL, keyed by its
// SHA-256; an allow for AllowCacheTTL and a deny for DenyCacheTTL, keyed by
// the SHA-256 of user, verb and path (the caller's method and path may be
// up to the server's header limit long); a failed review is not. The reviews' requests are
// traced as the Client's others are, but none in a context with no span,
// as a scrape's are (see the kube package's transport). Why a caller was
// refused is logged at DEBUG, and a failed review at ERROR, with
// s.Telemetry's LoggerProvider; the response says only the status and,
// for a 403, the user.
//
// It returns one error naming each of s, c and next that is nil.
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
	log := logattrs.NewLogger("github.com/z5labs/humus/kube/delegatedauth", s.Telemetry.WithNoops().LoggerProvider)
	return &handler{
		tokens:    authn.TokenReviews(),
		reviews:   authz.SubjectAccessReviews(),
		users:     cache.NewLRUExpireCache(CacheSize),
		decisions: cache.NewLRUExpireCache(CacheSize),
		next:      next,
		log:       log,
	}, nil
}

type handler struct {
	tokens    authenticationv1.TokenReviewInterface
	reviews   authorizationv1.SubjectAccessReviewInterface
	users     *cache.LRUExpireCache // a token's SHA-256 -> *authnv1.UserInfo, nil when not authenticated
	decisions *cache.LRUExpireCache // a SubjectAccessReviewSpec's JSON's SHA-256 -> allowed
	// reviewing merges concurrent reviews of one token, or of one spec,
	// into one, as k8s.io/apiserver's cached token authenticator does:
	// a scrape's burst of requests with a new token sends one
	// TokenReview, not one a request.
	reviewing singleflight.Group
	next      http.Handler
	log       *slog.Logger
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	token := bearer(r.Header.Get("Authorization"))
	if token == "" {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	user, err := h.authenticate(ctx, token)
	if err != nil {
		// The API server answers 401 to a token it couldn't review too
		// (filters.WithAuthentication).
		h.log.ErrorContext(ctx, "delegatedauth: a TokenReview failed", "path", r.URL.Path, "error", err.Error())
	}
	if user == nil {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	verb := strings.ToLower(r.Method)
	allowed, err := h.authorize(ctx, user, verb, r.URL.Path)
	if err != nil {
		h.log.ErrorContext(ctx, "delegatedauth: a SubjectAccessReview failed", "user", user.Username, "path", r.URL.Path, "error", err.Error())
		http.Error(w, "Internal Server Error: the authorization review failed", http.StatusInternalServerError)
		return
	}
	if !allowed {
		h.log.DebugContext(ctx, "delegatedauth: forbidden", "user", user.Username, "verb", verb, "path", r.URL.Path)
		http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s %s", user.Username, verb, r.URL.Path), http.StatusForbidden)
		return
	}
	r.Header.Del("Authorization")
	h.next.ServeHTTP(w, r)
}

// bearer returns the token of an Authorization header's value,
// "Bearer <token>" with the scheme in any case, or "" for none: for
// another scheme, no token, or a token with a space in it.
func bearer(header string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.Contains(token, " ") {
		return ""
	}
	return token
}

// authenticate returns the user the API server authenticates token as, or
// nil for none, from the cache or a TokenReview.
func (h *handler) authenticate(ctx context.Context, token string) (*authnv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	if v, ok := h.users.Get(key); ok {
		return v.(*authnv1.UserInfo), nil
	}
	v, err, _ := h.reviewing.Do("token "+string(key[:]), func() (any, error) {
		// Shared by every caller waiting on it: not ended by the first
		// caller's going away, and bounded by ReviewTimeout.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReviewTimeout)
		defer cancel()
		review, err := h.tokens.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		var user *authnv1.UserInfo
		if review.Status.Authenticated {
			user = &review.Status.User
			if !slices.Contains(user.Groups, authenticatedGroup) {
				user.Groups = append(user.Groups, authenticatedGroup)
			}
		}
		h.users.Add(key, user, TokenCacheTTL)
		return user, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*authnv1.UserInfo), nil
}

// authorize returns whether the API server allows user verb on the
// non-resource URL path, from the cache or a SubjectAccessReview.
func (h *handler) authorize(ctx context.Context, user *authnv1.UserInfo, verb, path string) (bool, error) {
	spec := authzv1.SubjectAccessReviewSpec{
		User:                  user.Username,
		UID:                   user.UID,
		Groups:                user.Groups,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	}
	if len(user.Extra) > 0 {
		spec.Extra = make(map[string]authzv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			spec.Extra[k] = authzv1.ExtraValue(v)
		}
	}
	// encoding/json writes a map's keys sorted, so one spec has one key.
	// The key is its SHA-256, as a token's is: the verb and path are the
	// caller's, a method or path of up to the server's 1 MB header limit,
	// so CacheSize keys of the JSON itself could hold gigabytes.
	b, err := json.Marshal(spec)
	if err != nil {
		return false, err
	}
	key := sha256.Sum256(b)
	if v, ok := h.decisions.Get(key); ok {
		return v.(bool), nil
	}
	v, err, _ := h.reviewing.Do("access "+string(key[:]), func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReviewTimeout)
		defer cancel()
		review, err := h.reviews.Create(ctx, &authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		if review.Status.EvaluationError != "" && !review.Status.Allowed && !review.Status.Denied {
			h.log.DebugContext(ctx, "delegatedauth: the SubjectAccessReview's evaluation error", "user", user.Username, "error", review.Status.EvaluationError)
		}
		ttl := DenyCacheTTL
		if review.Status.Allowed {
			ttl = AllowCacheTTL
		}
		h.decisions.Add(key, review.Status.Allowed, ttl)
		return review.Status.Allowed, nil
	})
	if err != nil {
		return false, err
	}
	return v.(bool), nil
}
