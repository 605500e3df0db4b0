// Package release holds the test that every version string of a release agrees with the
// repository's VERSION file (docs/release.md): the Makefile's stamp, the chart's version,
// appVersion and default image tag, the rendered manifests' image and the unstamped
// driver version.
package release
