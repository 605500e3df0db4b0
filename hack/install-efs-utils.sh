#!/usr/bin/env bash
# Installs amazon-efs-utils (mount.efs, mount.s3files, their Python packages, the watchdog
# and the static files) from the pinned release tarball into DESTDIR, as the release's own
# build-deb.sh installs it, in the image's layout:
#
#   DESTDIR/sbin/mount.efs, DESTDIR/sbin/mount.s3files          (0755; mount(8) runs them)
#   DESTDIR/sbin/efs_utils_common/, mount_efs/, mount_s3files/  (0644 *.py; imported by them)
#   DESTDIR/usr/bin/amazon-efs-mount-watchdog                   (0755)
#   DESTDIR/etc/amazon/efs-static-files/efs-utils.crt           (0444)
#   DESTDIR/etc/amazon/efs-static-files/efs-utils.conf          (0644)
#   DESTDIR/etc/amazon/efs-static-files/s3files-utils.conf      (0644)
#   DESTDIR/var/log/amazon/efs/                                 (their log directory)
#
# The static files go to /etc/amazon/efs-static-files (--efs-utils-static-files-path), not to
# /etc/amazon/efs, which the image links to the node's configuration directory. efs-proxy
# (Rust) is not built here: the Dockerfile builds it from the same tarball.
#
#   hack/install-efs-utils.sh DESTDIR [TARBALL]
#
# TARBALL defaults to the release tag's source tarball, downloaded from GitHub. Either way
# it must have the pinned sha256, its config.ini must name the pinned version, and the
# installed mount.efs, mount.s3files and watchdog must print it with --version (that needs
# python3). The pins are hack/versions' EFS_UTILS_VERSION and EFS_UTILS_SHA256; the same
# variables in the environment (the Dockerfile's build arguments) win.
set -euo pipefail

die() { echo "install-efs-utils: $*" >&2; exit 1; }

[ $# -ge 1 ] && [ $# -le 2 ] && [ -n "$1" ] || die "usage: $0 DESTDIR [TARBALL]"
destdir=$1
tarball=${2:-}

here=$(cd "$(dirname "$0")" && pwd)
pin() {
  local name=$1 v
  v=$(sed -n "s/^${name}=//p" "${here}/versions" 2>/dev/null || true)
  [ -n "${v}" ] || die "${here}/versions has no ${name}"
  printf '%s' "${v}"
}
version=${EFS_UTILS_VERSION:-$(pin EFS_UTILS_VERSION)}
sha256=${EFS_UTILS_SHA256:-$(pin EFS_UTILS_SHA256)}
[[ ${version} =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "EFS_UTILS_VERSION ${version} is not X.Y.Z"
[[ ${sha256} =~ ^[0-9a-f]{64}$ ]] || die "EFS_UTILS_SHA256 ${sha256} is not a sha256"

work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
if [ -z "${tarball}" ]; then
  tarball=${work}/efs-utils.tar.gz
  curl -fsSL --retry 3 -o "${tarball}" \
    "https://github.com/aws/efs-utils/archive/refs/tags/v${version}.tar.gz"
fi
[ -f "${tarball}" ] || die "${tarball}: no such file"
echo "${sha256}  ${tarball}" | sha256sum -c - >/dev/null 2>&1 \
  || die "${tarball}: sha256 $(sha256sum "${tarball}" | cut -d' ' -f1), want ${sha256} (efs-utils ${version})"

src=${work}/src
mkdir -p "${src}"
tar -xzf "${tarball}" -C "${src}" --strip-components=1
# The release's own version must be the pin: a moved tag or a mistyped version fails here.
grep -qx "version=${version}" "${src}/config.ini" \
  || die "the tarball's config.ini says $(grep '^version=' "${src}/config.ini" || echo 'no version'), want ${version}"

cd "${src}"
# The file list of build-deb.sh (sbin/, usr/bin/; etc/amazon/efs becomes the static files).
install -d -m 0755 "${destdir}/sbin/efs_utils_common" "${destdir}/sbin/mount_efs" "${destdir}/sbin/mount_s3files" \
  "${destdir}/usr/bin" "${destdir}/etc/amazon/efs-static-files" "${destdir}/var/log/amazon/efs"
install -p -m 0755 src/mount_efs/__init__.py "${destdir}/sbin/mount.efs"
install -p -m 0755 src/mount_s3files/__init__.py "${destdir}/sbin/mount.s3files"
install -p -m 0755 src/watchdog/__init__.py "${destdir}/usr/bin/amazon-efs-mount-watchdog"
install -p -m 0644 src/efs_utils_common/*.py "${destdir}/sbin/efs_utils_common"
install -p -m 0644 src/mount_efs/*.py "${destdir}/sbin/mount_efs"
install -p -m 0644 src/mount_s3files/*.py "${destdir}/sbin/mount_s3files"
install -p -m 0444 dist/efs-utils.crt "${destdir}/etc/amazon/efs-static-files/efs-utils.crt"
install -p -m 0644 dist/efs-utils.conf "${destdir}/etc/amazon/efs-static-files/efs-utils.conf"
install -p -m 0644 dist/s3files-utils.conf "${destdir}/etc/amazon/efs-static-files/s3files-utils.conf"

# What was installed runs, and is the pinned release.
for prog in sbin/mount.efs sbin/mount.s3files usr/bin/amazon-efs-mount-watchdog; do
  out=$(python3 "${destdir}/${prog}" --version) || die "${prog} --version failed: ${out}"
  [ "${out}" = "${destdir}/${prog} Version: ${version}" ] \
    || die "${prog} --version printed \"${out}\", want version ${version}"
done
echo "install-efs-utils: efs-utils ${version} installed in ${destdir}"
