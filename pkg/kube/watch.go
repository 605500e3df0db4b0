package kube

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// WatchVolumeHandles calls fn with the CSI volume handle of every
// PersistentVolume of driver that is created or changed from now on, until
// ctx ends. It sees PVs that exist only between two lists, which a reader
// that lists now and then misses. No informer: it needs no cache of the
// objects, only their events. After a broken watch it resumes from the last
// version seen; when that is too old for the API server (410 Gone), it
// starts again from now, so a PV created and deleted during that gap is
// missed. fn must not block long: events wait for it.
func (c *Client) WatchVolumeHandles(ctx context.Context, driver string, fn func(handle string)) {
	rv := ""
	for backoff := time.Second; ctx.Err() == nil; {
		if rv == "" {
			// The current version: one item is enough to read it.
			l, err := c.core.PersistentVolumes().List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				sleep(ctx, &backoff)
				continue
			}
			rv = l.ResourceVersion
		}
		w, err := c.core.PersistentVolumes().Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			sleep(ctx, &backoff)
			continue
		}
		rv = drain(w, driver, rv, fn)
		w.Stop()
		if rv == "" {
			sleep(ctx, &backoff) // the watch failed: do not spin on a server that keeps failing it
		} else {
			backoff = time.Second
		}
	}
}

// drain forwards the watch's events until it ends and returns the version
// to resume from ("" to start again from now).
func drain(w watch.Interface, driver, rv string, fn func(string)) string {
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Error:
			return "" // 410 Gone or another failure of this watch: start again from now
		case watch.Added, watch.Modified, watch.Bookmark:
			pv, ok := ev.Object.(*corev1.PersistentVolume)
			if !ok {
				return ""
			}
			rv = pv.ResourceVersion
			if csi := pv.Spec.CSI; ev.Type != watch.Bookmark && csi != nil && csi.Driver == driver {
				fn(csi.VolumeHandle)
			}
		case watch.Deleted:
			if pv, ok := ev.Object.(*corev1.PersistentVolume); ok {
				rv = pv.ResourceVersion
			}
		}
	}
	return rv
}

func sleep(ctx context.Context, backoff *time.Duration) {
	t := time.NewTimer(*backoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	*backoff = min(2**backoff, time.Minute)
}
