package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	coordinationv1api "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// leaseWriter sends a shard's write, already encoded, over the REST
// client's own http.Client (its TLS, credentials and user agent), and
// reads the answer into a buffer.
//
// Written by hand rather than through client-go's rest.Request, which
// builds the request's URL five times a request (path.Join, url.Parse)
// and runs its retry and metrics machinery around every send: in
// BenchmarkLeaseRecordPairs that was 0.28 s of writeShard's 0.74 s. The
// answer is what client-go makes of it: a 2xx is the body, anything else
// the API server's Status as an error (apierrors), or, from something
// that is no API server, a generic error with the HTTP status code.
// Unlike client-go, a 5xx that carries Retry-After is not sent again: its
// write's outcome is unknown, which the store answers (ErrUnavailable,
// the shard forgotten). A 429 is: the API server refused it unserved
// (priority and fairness), as client-go does, up to 10 times while the
// call's context lasts.
type leaseWriter struct {
	client *http.Client
	// collection is the URL of the namespace's Leases (create); a Lease's
	// is collection + "/" + name (update).
	collection string
}

func newLeaseWriter(rc rest.Interface, ns string) leaseWriter {
	c, ok := rc.(*rest.RESTClient)
	if !ok || c.Client == nil {
		// NewForConfig makes a *rest.RESTClient with its http.Client.
		panic(fmt.Sprintf("kube: a REST client without its http.Client: %T", rc))
	}
	return leaseWriter{client: c.Client, collection: rc.Post().Namespace(ns).Resource("leases").URL().String()}
}

// writeAccept and writeQuery ask the API server to answer a write with a
// Table of the Lease without the object (about 1.4 KB from kube-apiserver,
// whatever the shard holds) rather than the Lease sent back whole (up to
// about 64 KiB): only its resourceVersion is read, which the Table carries
// as its own. An API server without Tables for Leases answers the next
// form, the Lease in protobuf; errors come as a Status either way.
const (
	writeAccept = runtime.ContentTypeJSON + ";as=Table;v=v1;g=meta.k8s.io," + runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	writeQuery  = "?includeObject=None"
)

// leaseWriteRetries bounds the sends of one write the API server answers
// 429 with Retry-After, as client-go's default does.
const leaseWriteRetries = 10

var leasesResource = schema.GroupResource{Group: coordinationv1api.GroupName, Resource: "leases"}

// send POSTs (create) or PUTs (update) body, the Lease name encoded, and
// reads a 2xx answer into answer.
func (w leaseWriter) send(ctx context.Context, create bool, name string, body []byte, answer *bytes.Buffer) error {
	method, url := http.MethodPut, w.collection+"/"+name+writeQuery
	if create {
		method, url = http.MethodPost, w.collection+writeQuery
	}
	for try := 1; ; try++ {
		req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", runtime.ContentTypeProtobuf)
		req.Header.Set("Accept", writeAccept)
		resp, err := w.client.Do(req)
		if err != nil {
			return err
		}
		answer.Reset()
		_, err = answer.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			if err != nil {
				return fmt.Errorf("%w: reading the answer", err)
			}
			return nil
		}
		after, hasAfter := retryAfter(resp)
		if resp.StatusCode == http.StatusTooManyRequests && hasAfter && try < leaseWriteRetries {
			t := time.NewTimer(time.Duration(after) * time.Second)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
			}
		}
		return answerError(resp, answer.Bytes(), method, name, after)
	}
}

// answerError is the error of an answer that is not a 2xx, as client-go
// makes it: the API server's Status, else a generic error of its code
// (with the body as its message when it is text).
func answerError(resp *http.Response, body []byte, method, name string, retryAfter int) error {
	contentType := resp.Header.Get("Content-Type")
	media, _, _ := mime.ParseMediaType(contentType) // "" when it does not parse
	var st metav1.Status
	if decodeStatus(media, body, &st) && st.Status != metav1.StatusSuccess {
		return &apierrors.StatusError{ErrStatus: st}
	}
	message := "unknown"
	if contentType == "" || strings.HasPrefix(media, "text/") {
		message = strings.TrimSpace(string(body[:min(len(body), 2048)]))
	}
	return apierrors.NewGenericServerResponse(resp.StatusCode, method, leasesResource, name, message, retryAfter, true)
}

// decodeStatus decodes body, of media type media, as a metav1.Status:
// false if it is none.
func decodeStatus(media string, body []byte, st *metav1.Status) bool {
	switch media {
	case runtime.ContentTypeProtobuf:
		obj, _, err := leaseSerializer.Decode(body, nil, st)
		return err == nil && obj == st && st.Kind == "Status"
	case runtime.ContentTypeJSON:
		return json.Unmarshal(body, st) == nil && st.Kind == "Status"
	}
	return false
}

// retryAfter is the answer's Retry-After in seconds, if it has one.
func retryAfter(resp *http.Response) (int, bool) {
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
