package driver

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/efs-csi/efs-csi-driver/pkg/kube"
)

// AgentNotReadyTaint is the startup taint (upstream's key) a cluster puts on new Nodes,
// so that pods with EFS volumes wait until the node plugin can mount them. The node
// plugin removes it, with any effect, once it serves.
const AgentNotReadyTaint = "efs.csi.aws.com/agent-not-ready"

// TaintRemover removes a taint from a Node (kube.Client).
type TaintRemover interface {
	// RemoveNodeTaint removes every taint with key from the Node name, leaving the
	// others as they are, and reports whether it removed one. Idempotent: a Node
	// without the taint is not written and answers (false, nil). A concurrent change
	// of the Node's taints is not overwritten. Errors are the API's (NotFound,
	// Forbidden, unreachable): the caller retries.
	RemoveNodeTaint(ctx context.Context, name, key string) (bool, error)
}

// startupTaint removes AgentNotReadyTaint from this node once the plugin's own socket
// answers a CSI Probe: the signal node-driver-registrar waits for before it registers
// the plugin with the kubelet.
type startupTaint struct {
	kube   TaintRemover
	node   string // the Node object's name
	socket string
	log    *slog.Logger
	// Backoff between attempts, doubling from min to max; the loop ends only with
	// success or its context.
	minBackoff, maxBackoff time.Duration
	// quiet is how long a failure that repeats the last one is logged at Debug
	// only: a node plugin without patch on Nodes fails the same way every
	// maxBackoff for as long as it runs.
	quiet time.Duration
}

func newStartupTaint(k TaintRemover, node, socket string, log *slog.Logger) *startupTaint {
	return &startupTaint{kube: k, node: node, socket: socket, log: log, minBackoff: time.Second, maxBackoff: time.Minute,
		quiet: time.Hour}
}

// startupTaintFor returns the node plugin's taint remover, or nil without a Kubernetes
// API (outside a cluster, or no usable credentials): then the taint, if any, is left to
// whoever put it, said in one log line. kc is the client the controller made (mode all),
// or nil.
func startupTaintFor(cfg Config, kc *kube.Client, socket string) *startupTaint {
	if !cfg.Kube.Configured() {
		cfg.Logger.Info("no Kubernetes API: not removing the startup taint " + AgentNotReadyTaint)
		return nil
	}
	if kc == nil {
		var err error
		if kc, err = kube.New(cfg.Kube); err != nil {
			cfg.Logger.Warn("no Kubernetes API client: not removing the startup taint "+AgentNotReadyTaint,
				slog.String("error", err.Error()))
			return nil
		}
	}
	return newStartupTaint(kc, nodeName(cfg.NodeID), socket, cfg.Logger)
}

// nodeName is the Node object's name: $NODE_NAME (the chart's downward API) or upstream's
// $CSI_NODE_NAME, else the node ID (the chart passes --node-id=$(NODE_NAME); a node ID
// from instance metadata is an instance ID, the Node's name only on some clusters).
func nodeName(nodeID string) string {
	for _, env := range []string{"NODE_NAME", "CSI_NODE_NAME"} {
		if n := os.Getenv(env); n != "" {
			return n
		}
	}
	return nodeID
}

// run waits for the socket to answer a Probe, then removes the taint, retrying both with
// backoff until done or ctx ends.
func (s *startupTaint) run(ctx context.Context) {
	conn, err := grpc.NewClient("unix://"+s.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil { // only for a malformed target, which socketPath prevents
		s.log.Error("startup taint: CSI socket", slog.String("error", err.Error()))
		return
	}
	defer conn.Close()
	identity := csi.NewIdentityClient(conn)
	probe := func(ctx context.Context) error {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := identity.Probe(pctx, &csi.ProbeRequest{})
		if err == nil && resp.GetReady() != nil && !resp.GetReady().GetValue() {
			err = errors.New("probe: not ready")
		}
		return err
	}
	if !s.retry(ctx, "CSI socket probe", probe) {
		return
	}
	s.retry(ctx, "remove taint "+AgentNotReadyTaint, func(ctx context.Context) error {
		removed, err := s.kube.RemoveNodeTaint(ctx, s.node, AgentNotReadyTaint)
		if err == nil {
			s.log.Info("startup taint", slog.String("node", s.node), slog.String("taint", AgentNotReadyTaint),
				slog.Bool("removed", removed))
		}
		return err
	})
}

// retry calls fn until it succeeds (true) or ctx ends (false). A failure is a
// warning the first time, when its error changes and once per quiet period;
// its repeats in between are Debug records.
func (s *startupTaint) retry(ctx context.Context, what string, fn func(context.Context) error) bool {
	backoff := s.minBackoff
	var last string
	var warned time.Time
	for {
		err := fn(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		level, msg := slog.LevelDebug, "startup taint: "+what+" failed again; retrying"
		if err.Error() != last || time.Since(warned) >= s.quiet {
			level, msg, last, warned = slog.LevelWarn, "startup taint: "+what+" failed; retrying", err.Error(), time.Now()
			if apierrors.IsForbidden(err) {
				msg += " (without patch on Nodes, as with the chart's node.serviceAccount.disableMutation, set DISABLE_TAINT_WATCHER)"
			}
		}
		s.log.Log(ctx, level, msg, slog.String("node", s.node), slog.Duration("in", backoff), slog.String("error", err.Error()))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		backoff = min(2*backoff, s.maxBackoff)
	}
}
