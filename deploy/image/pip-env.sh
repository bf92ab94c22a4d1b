# Sourced (POSIX sh) by the Dockerfile's build stage before each pip command: turns the
# build args into pip's settings. An empty arg (compose passes unset ones as "") is dropped,
# so pip keeps its default; EXTRA_CA_CERTS (PEM text) is appended to the base image's CA
# bundle (or pip's own, if the image has none) and handed to pip as PIP_CERT.
for _v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST; do
  eval "[ -n \"\${$_v:-}\" ] || unset $_v"
done
if [ -n "${EXTRA_CA_CERTS:-}" ]; then
  if [ -s /etc/ssl/certs/ca-certificates.crt ]; then
    cat /etc/ssl/certs/ca-certificates.crt >/tmp/pip-ca.pem
  else
    cat "$(/opt/build/bin/python -m pip._vendor.certifi)" >/tmp/pip-ca.pem
  fi
  printf '\n%s\n' "$EXTRA_CA_CERTS" >>/tmp/pip-ca.pem
  export PIP_CERT=/tmp/pip-ca.pem
fi
unset EXTRA_CA_CERTS _v
