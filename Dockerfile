# kdiag in a container.
#
# Build:  docker build -t kdiag .
#
# A container sees its own PID, network and mount namespaces, so to diagnose the host it needs:
#   --pid=host                   the host's processes (brokers, top storage readers)
#   --network=host               the host's NICs: /proc/net/* and /sys/class/net are per network namespace
#   -v /proc:/host/proc:ro -v /sys:/host/sys:ro   and   run --procfs /host/proc --sysfs /host/sys
# JMX: kdiag keeps one JmxTool JVM per broker (the JRE is in the image) on the broker's own jars: mount them at
# the path the broker's -cp names (kdiag run takes it from the broker process), e.g. -v /opt/kafka/libs:/opt/kafka/libs:ro,
# or set kafka.jmx_classpath
#
# On Kubernetes: deploy/kubernetes (README, "Kubernetes"): root with the unit's two capabilities only, since a
# non-root user keeps no added capability there.
#
# Non-root, as the broker's uid (its /proc entries are then readable without any capability); see
# docs/DEPLOY.md for what the two --cap-add flags do (under Docker: nothing for a non-root user).
#
# docker run -d --name kdiag --pid=host --network=host --read-only \
#   --user "$(id -u kafka):$(id -g kafka)" --security-opt no-new-privileges \
#   --cap-drop ALL --cap-add SYS_PTRACE --cap-add DAC_READ_SEARCH \
#   -v /proc:/host/proc:ro -v /sys:/host/sys:ro -v /etc/kdiag:/etc/kdiag:ro -v /opt/kafka/libs:/opt/kafka/libs:ro \
#   kdiag run --procfs /host/proc --sysfs /host/sys --config /etc/kdiag/kdiag.yaml
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    KDIAG_HEALTHCHECK_URL=http://127.0.0.1:9745/healthz

# The JmxTool JVM that reads the brokers' MBeans.
RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml constraints.txt ./
# kdiag/rules is a symlink to rules/: both are needed for the wheel to carry the catalog.
COPY rules ./rules
COPY kdiag ./kdiag
# The dependencies at the versions kdiag's tests pass with (constraints.txt), not whatever is newest at build time.
RUN pip install -c constraints.txt . \
    && rm -rf /src \
    && useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kdiag \
    && mkdir -p /etc/kdiag /var/lib/kdiag \
    && echo '{}' > /etc/kdiag/kdiag.yaml \
    && chown kdiag:kdiag /var/lib/kdiag && chmod 0700 /var/lib/kdiag

WORKDIR /
USER kdiag
EXPOSE 9745
# /healthz turns non-200 when collection stalls; point KDIAG_HEALTHCHECK_URL elsewhere if --listen differs.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['KDIAG_HEALTHCHECK_URL'], timeout=4)"]
# As the systemd unit runs it (systemd/kdiag.service): every key has a default, /etc/kdiag/kdiag.yaml is mounted over.
ENTRYPOINT ["kdiag"]
CMD ["run", "--config", "/etc/kdiag/kdiag.yaml"]
