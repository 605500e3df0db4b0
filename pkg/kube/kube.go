// Package kube is the few Kubernetes API reads the orphan collector needs,
// over plain HTTPS with a bearer token: no client library, no watch, no cache.
package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// In-cluster defaults, as every pod sees them.
const (
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// Config locates the API server. Empty fields take the in-cluster defaults.
type Config struct {
	URL       string // https://host:port
	TokenFile string
	CAFile    string
}

// Client reads PersistentVolumes and PersistentVolumeClaims.
type Client struct {
	base      *url.URL
	tokenFile string
	http      *http.Client
}

// New validates cfg, filling in-cluster defaults.
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, errors.New("kube: no API server URL and not running in a cluster")
		}
		cfg.URL = "https://" + net.JoinHostPort(host, port)
	}
	if cfg.TokenFile == "" {
		cfg.TokenFile = serviceAccountDir + "/token"
	}
	if cfg.CAFile == "" {
		cfg.CAFile = serviceAccountDir + "/ca.crt"
	}
	base, err := url.Parse(cfg.URL)
	if err != nil || base.Scheme == "" || base.Host == "" {
		return nil, fmt.Errorf("kube: API server URL %q is not absolute", cfg.URL)
	}
	pem, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("kube: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("kube: no certificate in %s", cfg.CAFile)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &Client{base: base, tokenFile: cfg.TokenFile, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, nil
}

// errNotFound is an HTTP 404 from the API server.
var errNotFound = errors.New("not found")

func (c *Client) get(ctx context.Context, path string, query url.Values, out any) error {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	// Re-read each time: projected service account tokens rotate.
	token, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return fmt.Errorf("kube: token: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("kube: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return errNotFound
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("kube: GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

type objectMeta struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

type pvList struct {
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []struct {
		Metadata objectMeta `json:"metadata"`
		Spec     struct {
			CSI *struct {
				Driver       string `json:"driver"`
				VolumeHandle string `json:"volumeHandle"`
			} `json:"csi"`
		} `json:"spec"`
	} `json:"items"`
}

// VolumeHandles returns the CSI volume handles of every PersistentVolume of
// the given driver.
func (c *Client) VolumeHandles(ctx context.Context, driver string) ([]string, error) {
	var handles []string
	q := url.Values{"limit": {"500"}}
	for {
		var l pvList
		if err := c.get(ctx, "/api/v1/persistentvolumes", q, &l); err != nil {
			return nil, err
		}
		for _, pv := range l.Items {
			if csi := pv.Spec.CSI; csi != nil && csi.Driver == driver {
				handles = append(handles, csi.VolumeHandle)
			}
		}
		if l.Metadata.Continue == "" {
			return handles, nil
		}
		q.Set("continue", l.Metadata.Continue)
	}
}

// ClaimUID returns the UID of the PersistentVolumeClaim namespace/name, or ""
// when it does not exist.
func (c *Client) ClaimUID(ctx context.Context, namespace, name string) (string, error) {
	var pvc struct {
		Metadata objectMeta `json:"metadata"`
	}
	err := c.get(ctx, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/persistentvolumeclaims/"+url.PathEscape(name), nil, &pvc)
	if errors.Is(err, errNotFound) {
		return "", nil
	}
	return pvc.Metadata.UID, err
}
