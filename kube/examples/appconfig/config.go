package appconfig

import (
	"context"
	"errors"
	"fmt"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/config"
	"github.com/z5labs/humus/kube"
)

// Config is everything an example App runs with.
type Config struct {
	// Connection is how the App reaches the API server: see InPod and
	// FromKubeconfig.
	Connection kube.Connection

	// Settings configure the App's Controller.
	Settings kube.Settings

	// ProbesAddr is the address the probes Service listens on, serving
	// /readyz, healthy once the Controller's caches have synced (and the
	// App's other readiness Monitors are healthy), and /livez.
	ProbesAddr string

	// Metrics is where and how the metrics are served: see ServeMetrics.
	// Its zero value serves none.
	Metrics MetricsConfig

	// Webhooks is where the webhooks are served: see webhookserve.Serve. Its
	// zero value serves none.
	Webhooks WebhookConfig
}

// The environment variables Read reads. None but POD_NAMESPACE and POD_NAME
// is required; KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are,
// when KUBECONFIG is unset, and the kubelet sets them in every container.
const (
	EnvKubeconfig    = "KUBECONFIG"              // a kubeconfig's absolute path; set, the App runs locally
	EnvKubeContext   = "KUBE_CONTEXT"            // the kubeconfig's context; default its current-context
	EnvServiceHost   = "KUBERNETES_SERVICE_HOST" // in a pod: the API server's host
	EnvServicePort   = "KUBERNETES_SERVICE_PORT" // in a pod: the API server's port
	EnvPodNamespace  = "POD_NAMESPACE"           // the Lease's namespace, from the downward API
	EnvPodName       = "POD_NAME"                // this replica's identity in the Lease, from the downward API
	EnvWatchNS       = "WATCH_NAMESPACE"         // Settings.Namespace; default "", every namespace
	EnvWorkers       = "WORKERS"                 // Settings.Workers; default 1
	EnvLeaseDuration = "LEASE_DURATION"          // a Go duration; default 15s
	EnvRenewDeadline = "RENEW_DEADLINE"          // a Go duration; default 10s
	EnvRetryPeriod   = "RETRY_PERIOD"            // a Go duration; default 2s
	EnvWatchTimeout  = "WATCH_TIMEOUT"           // Settings.WatchTimeout, a Go duration; default 30s
	EnvSharding      = "SHARDING"                // Settings.Sharding.Enabled, true or false; default false, one leader
	EnvShardingCache = "SHARDING_CACHE"          // Settings.Sharding.CacheShare: share (on, with SHARDING=true) or all; default all
	EnvProbesAddr    = "PROBES_ADDR"             // default ":8081"
)

// The values of SHARDING_CACHE: what each shard member caches.
const (
	// ShardingCacheAll caches every object in every member
	// (Sharding.CacheShare off), the default.
	ShardingCacheAll = "all"
	// ShardingCacheShare caches only each member's share, its objects and
	// their children, each labelled with its member (Sharding.CacheShare
	// on); it needs SHARDING=true.
	ShardingCacheShare = "share"
)

// readShardingCache returns Sharding.CacheShare for SHARDING_CACHE's value
// v, with SHARDING's sharding, or an error naming SHARDING_CACHE when v is
// neither all nor share, or is share without SHARDING=true.
func readShardingCache(v string, sharding bool) (bool, error) {
	switch v {
	case ShardingCacheAll:
		return false, nil
	case ShardingCacheShare:
		if !sharding {
			return false, fmt.Errorf("%s is %q but %s is not true: a member caches only its share when the replicas share the objects; set %s=true, or unset %s", EnvShardingCache, v, EnvSharding, EnvSharding, EnvShardingCache)
		}
		return true, nil
	}
	return false, fmt.Errorf("%s is %q: it is %s (each shard member caches every object, the default) or %s (each caches only its share; needs %s=true)", EnvShardingCache, v, ShardingCacheAll, ShardingCacheShare, EnvSharding)
}

// DefaultProbesAddr is where the probes Service listens unless PROBES_ADDR
// says otherwise.
const DefaultProbesAddr = ":8081"

// Read sources an App's Config from s.Host with the humus config package.
// The Settings are kube.DefaultSettings with Name name, the Lease's
// Namespace and Identity from POD_NAMESPACE and POD_NAME, and the optional
// variables above. The Connection comes from the kubeconfig KUBECONFIG
// names (see FromKubeconfig), or, when KUBECONFIG is unset, from the pod
// (see InPod). The Metrics are METRICS_ADDR, METRICS_SECURE and
// METRICS_CERT_DIR's (see MetricsConfig), the Webhooks WEBHOOK_ADDR's, and
// WEBHOOK_CERT_DIR's or WEBHOOK_CERT_SECRET's with POD_NAMESPACE (see
// WebhookConfig). It returns one error naming every
// variable that is missing or malformed, PROBES_ADDR and METRICS_ADDR among
// them when either isn't host:port with a port number, SHARDING_CACHE when
// it is neither all nor share or is share without SHARDING=true, and every
// mistake in the metrics' variables; or the error of reading the
// Connection.
func Read(ctx context.Context, s *humus.Setup, name string) (Config, error) {
	env := func(key string) config.Source { return config.Env(s.Host, key) }
	type values struct {
		kubeconfig, kubeContext, host, port string
		cfg                                 Config
		metricsAddr, metricsCertDir         string
		metricsSecure                       bool
		webhookAddr, webhookCertDir         string
		webhookCertSecret                   string
		shardingCache                       string
	}
	var probesErr, metricsErr, webhookErr, shardingErr error
	v, err := config.Struct(func(r *config.Resolver) values {
		var v values
		v.kubeconfig = r.GetOr(env(EnvKubeconfig), "")
		v.kubeContext = r.GetOr(env(EnvKubeContext), "")
		if v.kubeconfig == "" {
			v.host = r.Get(env(EnvServiceHost))
			v.port = r.Get(env(EnvServicePort))
		}
		st := kube.DefaultSettings()
		st.Name = name
		st.Namespace = r.GetOr(env(EnvWatchNS), "")
		st.Workers = r.IntOr(env(EnvWorkers), st.Workers)
		st.LeaderElection.Namespace = r.Get(env(EnvPodNamespace))
		st.LeaderElection.Identity = r.Get(env(EnvPodName))
		st.LeaderElection.LeaseDuration = r.DurationOr(env(EnvLeaseDuration), st.LeaderElection.LeaseDuration)
		st.LeaderElection.RenewDeadline = r.DurationOr(env(EnvRenewDeadline), st.LeaderElection.RenewDeadline)
		st.LeaderElection.RetryPeriod = r.DurationOr(env(EnvRetryPeriod), st.LeaderElection.RetryPeriod)
		st.WatchTimeout = r.DurationOr(env(EnvWatchTimeout), st.WatchTimeout)
		st.Sharding.Enabled = r.BoolOr(env(EnvSharding), st.Sharding.Enabled)
		v.shardingCache = r.GetOr(env(EnvShardingCache), ShardingCacheAll)
		v.cfg = Config{Settings: st, ProbesAddr: r.GetOr(env(EnvProbesAddr), DefaultProbesAddr)}
		v.metricsAddr = r.GetOr(env(EnvMetricsAddr), "")
		v.metricsSecure = r.BoolOr(env(EnvMetricsSecure), true)
		v.metricsCertDir = r.GetOr(env(EnvMetricsCertDir), "")
		// Checked here, so that one error names these mistakes with
		// the Resolver's.
		probesErr = checkAddr(EnvProbesAddr, v.cfg.ProbesAddr, DefaultProbesAddr)
		v.cfg.Settings.Sharding.CacheShare, shardingErr = readShardingCache(v.shardingCache, st.Sharding.Enabled)
		v.cfg.Metrics, metricsErr = readMetrics(v.metricsAddr, v.metricsCertDir, v.metricsSecure)
		v.webhookAddr = r.GetOr(env(EnvWebhookAddr), "")
		v.webhookCertDir = r.GetOr(env(EnvWebhookCertDir), "")
		v.webhookCertSecret = r.GetOr(env(EnvWebhookCertSecret), "")
		v.cfg.Webhooks, webhookErr = readWebhooks(v.webhookAddr, v.webhookCertDir, v.webhookCertSecret, st.LeaderElection.Namespace)
		return v
	}).Read(ctx)
	if err := errors.Join(err, probesErr, metricsErr, webhookErr, shardingErr); err != nil {
		return Config{}, err
	}
	if v.kubeconfig != "" {
		v.cfg.Connection, err = FromKubeconfig(s.Host.FS, v.kubeconfig, v.kubeContext)
	} else {
		v.cfg.Connection, err = InPod(s.Host.FS, v.host, v.port)
	}
	return v.cfg, err
}
