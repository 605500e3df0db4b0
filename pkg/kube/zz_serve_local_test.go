package kube_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

func TestZZServeLocal(t *testing.T) {
	out := os.Getenv("ZZ_SERVE")
	if out == "" {
		t.Skip()
	}
	k := kubetest.Start(t)
	tok := k.TokenFile("controller")
	os.WriteFile(out, []byte(k.URL+"\n"+tok+"\n"+k.CAFile+"\n"), 0o644)
	for {
		if _, err := os.Stat(out); err != nil {
			return
		}
		time.Sleep(time.Second)
		c := map[string]int{}
		for _, r := range k.Requests() {
			c[r.Method+" "+strings.Join(strings.Split(r.Path, "/")[:min(5, len(strings.Split(r.Path, "/")))], "/")]++
		}
		os.WriteFile(out+".count", []byte(fmt.Sprint(c)), 0o644)
	}
}
