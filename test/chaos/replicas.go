package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"time"

	"github.com/st-tech/fluent-pvc-operator/test/cluster"
)

// The operator's leader-election Lease: the namespace the replicas are
// given, and the name the operator gives it (main.go).
const (
	leaderElectionNamespace = cluster.OperatorNamespace
	leaderElectionID        = "fluent-pvc-operator.tech.zozo.com"
)

// replicas are the operator's replicas, with leader election, serving the
// webhook behind one round-robin load balancer: per connection (a
// Service's kube-proxy) or per request (an L7 proxy).
type replicas struct {
	ops []*cluster.Operator
	lb  balancer
	mu  sync.Mutex
}

// balancer is a load balancer in front of the replicas' webhook servers.
type balancer interface {
	Port() int
	Close() error
}

// startReplicas starts n managers reaching the API server through
// kubeconfig, sharing one serving certificate, and registers the webhook
// at a load balancer in front of them.
func startReplicas(ctx context.Context, c *cluster.Cluster, n int, kubeconfig string, perRequestLB bool, args []string) (*replicas, error) {
	r := &replicas{}
	certDir := filepath.Join(c.Dir, "certs")
	if _, err := cluster.WriteServingCert(certDir); err != nil {
		return nil, err
	}
	args = append([]string{"--leader-elect=true", "--namespace=" + leaderElectionNamespace}, args...)
	for i := range n {
		op, err := cluster.RunOperator(ctx, c, cluster.OperatorOptions{
			Instance: fmt.Sprintf("%d", i), CertDir: certDir, Kubeconfig: kubeconfig, WebhookPort: -1, Args: args,
		})
		if err != nil {
			return nil, errors.Join(err, r.Stop())
		}
		r.ops = append(r.ops, op)
	}
	var backends []string
	for _, op := range r.ops {
		backends = append(backends, fmt.Sprintf("127.0.0.1:%d", op.WebhookPort))
	}
	var lb balancer
	var err error
	if perRequestLB {
		lb, err = newPerRequest(backends, certDir)
	} else {
		lb, err = newRoundRobin(backends)
	}
	if err != nil {
		return nil, errors.Join(err, r.Stop())
	}
	r.lb = lb
	if err := c.RegisterWebhook(ctx, lb.Port(), certDir); err != nil {
		return nil, errors.Join(err, r.Stop())
	}
	return r, nil
}

// killOne SIGKILLs a random running replica and starts it again, or,
// every other time on average, rolls it: stops it with SIGTERM, as a
// rolling update does, and starts it again.
func (r *replicas) killOne(ctx context.Context, d *driver) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op := r.ops[rand.N(len(r.ops))]
	if op.PID() == 0 {
		return
	}
	pid := op.PID()
	if rand.N(2) == 0 {
		d.t.ReplicaRollouts.Add(1)
		d.logf("rolling replica PID %d (SIGTERM)", pid)
		d.fail("rolling a replica", op.Restart(ctx))
		return
	}
	if err := op.Kill(); err != nil {
		d.fail("killing a replica", err)
		return
	}
	d.t.ReplicaKills.Add(1)
	d.logf("SIGKILLed replica PID %d", pid)
	d.fail("restarting a killed replica", op.Restart(ctx))
}

// revive starts again any replica that exited on its own (for example
// when the proxy's faults cost it its leadership).
func (r *replicas) revive(ctx context.Context, d *driver) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, op := range r.ops {
		if op.PID() == 0 {
			d.t.ReplicaExits.Add(1)
			d.logf("a replica exited on its own; see %s", op.LogPath)
			d.fail("restarting an exited replica", op.Restart(ctx))
		}
	}
}

// Stop stops the replicas (SIGTERM) and the load balancer.
func (r *replicas) Stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, op := range r.ops {
		errs = append(errs, op.Stop())
	}
	if r.lb != nil {
		errs = append(errs, r.lb.Close())
	}
	return errors.Join(errs...)
}

// tick calls f every d until ctx ends.
func tick(ctx context.Context, wg *sync.WaitGroup, d time.Duration, f func(context.Context)) {
	every(ctx, wg, [2]time.Duration{d, d}, f)
}
