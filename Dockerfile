# The portal's one image: web (gunicorn, the default command), Celery worker, beat (run_beat),
# the watch sync and migrations all run from it with different commands, e.g.
#   celery -A portal worker --loglevel=INFO
#   python manage.py run_beat
#   python manage.py watch_workloads
#   python manage.py migrate --noinput
# It runs as the numeric user 10001 and writes only to /tmp and the volume /var/lib/gpu-portal, so
# it runs with readOnlyRootFilesystem. scripts/build-image.sh builds the same layout without
# Docker or a registry (buildah on a Debian base made by mmdebstrap).
#
# The base is pinned by exact tag. Pin it by digest where the registry can be reached:
#   docker buildx imagetools inspect python:3.11.14-slim-bookworm   # then PYTHON_IMAGE=python@sha256:...
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
# Behind a TLS-inspecting proxy: the path of its CA bundle, mounted for the build only (never
# copied into the image); scripts/build-image.sh passes the host's.
ARG PIP_CERT=""
RUN python -m venv /opt/venv
# Dependencies first (a layer that changes only with the lock), every file checked by its hash.
COPY requirements-runtime.lock requirements-build.lock /src/
RUN /opt/venv/bin/pip install ${PIP_CERT:+--cert "$PIP_CERT"} --require-hashes --only-binary=:all: \
      -r /src/requirements-runtime.lock \
 && python -m venv /opt/build \
 && /opt/build/bin/pip install ${PIP_CERT:+--cert "$PIP_CERT"} --require-hashes --only-binary=:all: \
      -r /src/requirements-build.lock
# The app as a wheel, installed without dependencies (the lock brought them).
COPY pyproject.toml manage.py /src/
COPY portal /src/portal
COPY tenants /src/tenants
COPY jobs /src/jobs
COPY billing /src/billing
COPY demo /src/demo
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels /src \
 && /opt/venv/bin/pip install --no-deps /wheels/gpu_portal-*.whl
# Templates, static sources and manage.py beside the wheel; static files collected (and
# compressed, with the manifest whitenoise serves from) under production settings.
COPY templates /app/templates
COPY static /app/static
RUN cp /src/manage.py /app/manage.py \
 && cd /app && PORTAL_APP_DIR=/app PORTAL_VAR_DIR=/tmp/var PORTAL_PRODUCTION=1 SECRET_KEY=build-only-not-a-secret \
    DATABASE_URL=postgres://build@localhost/build REDIS_URL=redis://localhost/0 SITE_URL=https://build.invalid \
    ALLOWED_HOSTS=build.invalid STATIC_ROOT=/app/staticfiles \
    /opt/venv/bin/python manage.py collectstatic --noinput --verbosity 0

FROM ${PYTHON_IMAGE} AS runtime
# WeasyPrint (PDF statements) needs Pango and a font.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libpango-1.0-0 libpangoft2-1.0-0 fonts-dejavu-core \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/gpu-portal && chown 10001:10001 /var/lib/gpu-portal
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    DJANGO_SETTINGS_MODULE=portal.settings \
    PORTAL_APP_DIR=/app STATIC_ROOT=/app/staticfiles PORTAL_VAR_DIR=/var/lib/gpu-portal \
    HOME=/tmp
VOLUME ["/var/lib/gpu-portal"]
WORKDIR /app
USER 10001:10001
EXPOSE 8000
# WEB_CONCURRENCY sets gunicorn's workers; GUNICORN_CMD_ARGS anything else.
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--worker-tmp-dir", "/tmp", "--access-logfile", "-"]
