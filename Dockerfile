# headroom's image: the controller (`headroom run`, the default) and `headroom train`.
# Not built in this repository's CI (no container runtime there): see docs/deploy.md.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib

# .dockerignore keeps tests, benchmarks, data and local MLflow stores out of the context.
COPY . /src
RUN pip install /src && rm -rf /src

# Numeric, so the kubelet can check runAsNonRoot without an /etc/passwd entry;
# the same id as runAsUser in deploy/base.
USER 10001:10001
WORKDIR /tmp
EXPOSE 9108
ENTRYPOINT ["headroom"]
CMD ["run"]
