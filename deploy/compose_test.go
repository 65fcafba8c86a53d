// Package deploy holds the support files of docker-compose.yml (Temporal's
// dynamic config) and the test that checks the compose file without a Docker
// engine: it is loaded and normalized with compose-go as `docker compose`
// would, and its services, ports, dependencies, health checks and
// environment are asserted.
package deploy

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/paygate/paygate/config"
)

const testSecret = "compose-test-secret-compose-test-secret-0123"

func load(t *testing.T, env ...string) (*types.Project, error) {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{"../docker-compose.yml"},
		cli.WithWorkingDirectory(".."), cli.WithName("paygate"), cli.WithEnv(env),
		cli.WithInterpolation(true), cli.WithNormalization(true), cli.WithConsistency(true), cli.WithResolvedPaths(true))
	if err != nil {
		t.Fatal(err)
	}
	return opts.LoadProject(context.Background())
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("service %s: %v", name, err)
	}
	return s
}

func env(s types.ServiceConfig, name string) string {
	v := s.Environment[name]
	if v == nil {
		return ""
	}
	return *v
}

func hasPublished(s types.ServiceConfig, target uint32, published string) bool {
	for _, p := range s.Ports {
		if p.Target == target && p.Published == published {
			return true
		}
	}
	return false
}

func dependsOn(t *testing.T, s types.ServiceConfig, want map[string]string) {
	t.Helper()
	for dep, cond := range want {
		d, ok := s.DependsOn[dep]
		if !ok {
			t.Errorf("%s does not depend on %s", s.Name, dep)
			continue
		}
		if d.Condition != cond {
			t.Errorf("%s depends on %s with %q, want %q", s.Name, dep, d.Condition, cond)
		}
	}
}

func healthcheck(t *testing.T, s types.ServiceConfig, contains string) {
	t.Helper()
	hc := s.HealthCheck
	if hc == nil || hc.Disable || len(hc.Test) < 2 {
		t.Errorf("%s has no health check", s.Name)
		return
	}
	if !strings.Contains(strings.Join(hc.Test, " "), contains) {
		t.Errorf("%s health check %v does not run %q", s.Name, hc.Test, contains)
	}
	if hc.Interval == nil || hc.Retries == nil {
		t.Errorf("%s health check needs an interval and retries", s.Name)
	}
}

// TestComposeFile: the stack of DESIGN.md section 2 (PostgreSQL, Temporal
// on it, its Web UI, Redis, a one-shot migration, the API and the worker
// from one image) with health checks and ordered start-up; the paygate
// services get a production configuration that config.Load accepts.
func TestComposeFile(t *testing.T) {
	p, err := load(t, "PAYGATE_SECRET_KEY="+testSecret)
	if err != nil {
		t.Fatalf("load docker-compose.yml: %v", err)
	}
	names := p.ServiceNames()
	for _, want := range []string{"postgres", "redis", "temporal", "temporal-ui", "migrate", "api", "worker"} {
		if !slices.Contains(names, want) {
			t.Errorf("service %s missing (have %v)", want, names)
		}
	}

	pg := service(t, p, "postgres")
	healthcheck(t, pg, "pg_isready")
	healthcheck(t, service(t, p, "redis"), "redis-cli")

	tmp := service(t, p, "temporal")
	if !strings.HasPrefix(tmp.Image, "temporalio/auto-setup:") || env(tmp, "DB") != "postgres12" || env(tmp, "POSTGRES_SEEDS") != "postgres" {
		t.Errorf("temporal must be auto-setup on the postgres service: %s %v", tmp.Image, tmp.Environment)
	}
	dependsOn(t, tmp, map[string]string{"postgres": types.ServiceConditionHealthy})
	healthcheck(t, tmp, "cluster health")
	if !hasPublished(tmp, 7233, "7233") {
		t.Errorf("temporal must publish 7233: %v", tmp.Ports)
	}
	dc := env(tmp, "DYNAMIC_CONFIG_FILE_PATH")
	mounted := false
	for _, v := range tmp.Volumes {
		if v.Type == types.VolumeTypeBind && strings.HasSuffix(v.Source, "deploy/temporal/dynamicconfig") && strings.HasPrefix("/etc/temporal/"+dc, v.Target) {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("the dynamic config %s is not mounted from deploy/: %v", dc, tmp.Volumes)
	}

	ui := service(t, p, "temporal-ui")
	if !strings.HasPrefix(ui.Image, "temporalio/ui:") || env(ui, "TEMPORAL_ADDRESS") != "temporal:7233" || !hasPublished(ui, 8080, "8233") {
		t.Errorf("temporal-ui: %s %v %v", ui.Image, ui.Environment, ui.Ports)
	}
	dependsOn(t, ui, map[string]string{"temporal": types.ServiceConditionHealthy})

	mig := service(t, p, "migrate")
	if mig.Build == nil || !strings.HasSuffix(mig.Build.Dockerfile, "Dockerfile") {
		t.Errorf("migrate builds the image from the Dockerfile: %+v", mig.Build)
	}
	if !slices.Equal([]string(mig.Command), []string{"migrate"}) {
		t.Errorf("migrate command %v", mig.Command)
	}
	dependsOn(t, mig, map[string]string{"postgres": types.ServiceConditionHealthy})

	api := service(t, p, "api")
	wrk := service(t, p, "worker")
	if api.Image != mig.Image || wrk.Image != mig.Image || api.Image == "" {
		t.Errorf("api, worker and migrate must share one image: %q %q %q", api.Image, wrk.Image, mig.Image)
	}
	if !slices.Equal([]string(api.Command), []string{"api"}) || !slices.Equal([]string(wrk.Command), []string{"worker"}) {
		t.Errorf("commands: api %v, worker %v", api.Command, wrk.Command)
	}
	if !hasPublished(api, 8080, "8080") || !hasPublished(wrk, 9091, "9091") {
		t.Errorf("ports: api %v, worker %v", api.Ports, wrk.Ports)
	}
	dependsOn(t, api, map[string]string{"migrate": types.ServiceConditionCompletedSuccessfully,
		"temporal": types.ServiceConditionHealthy, "redis": types.ServiceConditionHealthy})
	dependsOn(t, wrk, map[string]string{"migrate": types.ServiceConditionCompletedSuccessfully,
		"temporal": types.ServiceConditionHealthy})
	healthcheck(t, api, "/paygate api healthcheck")
	healthcheck(t, wrk, "/paygate worker healthcheck")
	if env(api, "PAYGATE_ADDR") != "0.0.0.0:8080" || env(wrk, "WORKER_METRICS_ADDR") != "0.0.0.0:9091" {
		t.Errorf("listen addresses: api %q, worker %q", env(api, "PAYGATE_ADDR"), env(wrk, "WORKER_METRICS_ADDR"))
	}

	for _, s := range []types.ServiceConfig{mig, api, wrk} {
		if env(s, "PAYGATE_PROFILE") != "production" || env(s, "PAYGATE_SECRET_KEY") != testSecret ||
			env(s, "TEMPORAL_ADDRESS") != "temporal:7233" || env(s, "TEMPORAL_NAMESPACE") != "default" ||
			env(s, "REDIS_URL") != "redis://redis:6379/0" {
			t.Errorf("%s environment: %v", s.Name, s.Environment)
		}
		u, err := url.Parse(env(s, "DATABASE_URL"))
		if err != nil || u.Scheme != "postgres" || u.Hostname() != "postgres" || u.Path != "/paygate" {
			t.Errorf("%s DATABASE_URL %q must point at the postgres service", s.Name, env(s, "DATABASE_URL"))
		}
		// The environment is one config.Load accepts as production.
		cfg, err := config.Load(func(k string) string { return env(s, k) })
		if err != nil {
			t.Errorf("%s: config.Load refuses the compose environment: %v", s.Name, err)
		} else if cfg.Embedded() {
			t.Errorf("%s runs the embedded profile", s.Name)
		}
	}
}

// TestComposeNeedsSecret: without PAYGATE_SECRET_KEY the file does not load
// (no default secret ships in it).
func TestComposeNeedsSecret(t *testing.T) {
	_, err := load(t)
	if err == nil || !strings.Contains(err.Error(), "PAYGATE_SECRET_KEY") {
		t.Fatalf("loading without PAYGATE_SECRET_KEY: %v", err)
	}
}
