package kube_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

const agentNotReady = "efs.csi.aws.com/agent-not-ready"

func taint(key string, effect corev1.TaintEffect) corev1.Taint {
	return corev1.Taint{Key: key, Effect: effect}
}

// RemoveNodeTaint removes the startup taint with every effect and nothing else, writes
// nothing when it is absent, and does not overwrite a taint someone else changed between
// its read and its write.
func TestRemoveNodeTaint(t *testing.T) {
	other := taint("dedicated", corev1.TaintEffectNoSchedule)
	late := taint("node.kubernetes.io/not-ready", corev1.TaintEffectNoExecute)
	cases := []struct {
		name string
		have []corev1.Taint
		// concurrent, if set, replaces the Node's taints just before the first PATCH is
		// served: the patch was computed from the taints read before.
		concurrent  []corev1.Taint
		wantRemoved bool
		want        []corev1.Taint
		wantPatches int
	}{
		{name: "only the startup taint", have: []corev1.Taint{taint(agentNotReady, corev1.TaintEffectNoExecute)},
			wantRemoved: true, want: nil, wantPatches: 1},
		{name: "every effect of it, the other taints kept in order",
			have: []corev1.Taint{other, taint(agentNotReady, corev1.TaintEffectNoSchedule), late,
				taint(agentNotReady, corev1.TaintEffectNoExecute)},
			wantRemoved: true, want: []corev1.Taint{other, late}, wantPatches: 1},
		{name: "no startup taint: no write", have: []corev1.Taint{other}, want: []corev1.Taint{other}},
		{name: "no taints at all: no write", have: nil, want: nil},
		{name: "a taint added meanwhile is kept (the test fails, then read again)",
			have:        []corev1.Taint{taint(agentNotReady, corev1.TaintEffectNoSchedule), other},
			concurrent:  []corev1.Taint{late, taint(agentNotReady, corev1.TaintEffectNoSchedule), other},
			wantRemoved: true, want: []corev1.Taint{late, other}, wantPatches: 2},
		{name: "removed by someone else meanwhile: the retry finds nothing to do",
			have:       []corev1.Taint{other, taint(agentNotReady, corev1.TaintEffectNoSchedule)},
			concurrent: []corev1.Taint{other}, want: []corev1.Taint{other}, wantPatches: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := kubetest.Start(t)
			k.SetNode("node-1", tc.have...)
			var once sync.Once
			if tc.concurrent != nil {
				k.OnRequest(func(r kubetest.Request) {
					if r.Method == "PATCH" {
						once.Do(func() { k.SetNode("node-1", tc.concurrent...) })
					}
				})
			}
			removed, err := client(t, k, "node").RemoveNodeTaint(context.Background(), "node-1", agentNotReady)
			if err != nil {
				t.Fatal(err)
			}
			if removed != tc.wantRemoved {
				t.Errorf("removed = %v, want %v", removed, tc.wantRemoved)
			}
			n, _ := k.Node("node-1")
			if !slices.EqualFunc(n.Spec.Taints, tc.want, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) }) {
				t.Errorf("taints %v, want %v", n.Spec.Taints, tc.want)
			}
			patches := k.Count("PATCH")
			if patches != tc.wantPatches {
				t.Errorf("%d PATCH requests, want %d", patches, tc.wantPatches)
			}
		})
	}
}

// A Node that does not exist is the API's NotFound, for the caller to retry.
func TestRemoveNodeTaintOfAMissingNode(t *testing.T) {
	k := kubetest.Start(t)
	_, err := client(t, k, "node").RemoveNodeTaint(context.Background(), "nowhere", agentNotReady)
	if !apierrors.IsNotFound(err) {
		t.Fatalf("err = %v, want NotFound", err)
	}
}
