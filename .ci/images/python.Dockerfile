# A python:3.11-slim-bookworm stand-in made from Debian packages (no registry needed).
FROM agentd-base/debian:bookworm
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-venv ca-certificates >/dev/null \
 && ln -s /usr/bin/python3 /usr/local/bin/python \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
CMD ["python3"]
