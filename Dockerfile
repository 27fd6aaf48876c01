# kdiag in a container.
#
# Build:  docker build -t kdiag .
#
# A container sees its own PID, network and mount namespaces, so to diagnose the host it needs:
#   --pid=host                   the host's processes (brokers, top storage readers)
#   --network=host               the host's NICs: /proc/net/* and /sys/class/net are per network namespace
#   -v /proc:/host/proc:ro -v /sys:/host/sys:ro   and   run --procfs /host/proc --sysfs /host/sys
#
# Reading another user's /proc/PID/io, fd/ and cwd passes the kernel's ptrace access check only with
# CAP_SYS_PTRACE (listing the 0500 fd/ directory of another user also needs CAP_DAC_READ_SEARCH).
# Docker does not make --cap-add effective for a non-root USER (the capabilities land in the
# inheritable set only), so pick one of:
#   --user "$(id -u kafka)"       same uid as the broker: its /proc entries are readable without capabilities
#   --user 0 --cap-drop ALL --cap-add SYS_PTRACE --cap-add DAC_READ_SEARCH   every process on the host
#
# docker run -d --name kdiag --pid=host --network=host --read-only \
#   -v /proc:/host/proc:ro -v /sys:/host/sys:ro -v /etc/kdiag:/etc/kdiag:ro \
#   --user 0 --cap-drop ALL --cap-add SYS_PTRACE --cap-add DAC_READ_SEARCH \
#   kdiag run --procfs /host/proc --sysfs /host/sys --config /etc/kdiag/kdiag.yaml
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml ./
# kdiag/rules is a symlink to rules/: both are needed for the wheel to carry the catalog.
COPY rules ./rules
COPY kdiag ./kdiag
RUN pip install . \
    && rm -rf /src \
    && useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kdiag

WORKDIR /
USER kdiag
EXPOSE 9745
ENTRYPOINT ["kdiag"]
CMD ["run"]
