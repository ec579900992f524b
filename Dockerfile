# zulip-compat-shim: a small image that runs the built CLI as a non-root user.
#   docker build -t zulip-compat-shim .
#   docker run --rm -p 9991:9991 -e UPSTREAM_URL=https://zulip.example.com zulip-compat-shim
#   docker run --rm -p 9991:9991 zulip-compat-shim --demo      (the bundled recording, to try it)
# Without an upstream (UPSTREAM_URL, --upstream, --replay or --demo) it exits 2 with one line.
# Every setting is a flag, an environment variable or a --config file (README "Configuration").
# Node 24 is the current LTS line; CI tests on Node 20 and later (package.json "engines").

# The base, pinned by digest (the multi-platform index's; the tag is kept for the reader): a
# rebuilt node:24-slim changes nothing here until this line is changed. To update it, where
# Docker Hub is reachable:
#   docker buildx imagetools inspect node:24-slim     # the "Digest:" line, sha256:…
# and write that digest below (docs/deployment.md, "Pinning images"). A pinned base gets no
# security fixes until it is updated: look again at each release (CHANGELOG.md).
FROM node:24-slim@sha256:a9f5f7c91a432850b2a8a7797adf5eadb6c733ceed61167806cee7ea7fbc29df AS base

FROM base AS build
WORKDIR /app
# The one dependency install. Scripts off: nothing of ours needs one, and the build runs below.
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY . .
# The build, then the development dependencies dropped: the runtime stage copies what is left.
# examples/ holds the demo recording; make sure it exists for the COPY of the next stage.
RUN npm run build && npm prune --omit=dev --ignore-scripts && mkdir -p examples

FROM base
ENV NODE_ENV=production \
    HOST=0.0.0.0
# No package manager at run time: the image runs node and nothing installs into it.
RUN rm -rf /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/corepack \
      /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack \
      /usr/local/bin/yarn /usr/local/bin/yarnpkg /opt/yarn-v*
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/config ./config
COPY --from=build /app/examples ./examples
# A writable place for --record FILE.har (mount a volume here to keep recordings).
RUN mkdir -p /data && chown node:node /data
USER node
EXPOSE 9991
# The CLI checks /healthz itself (no curl in the image), at the port and host the running shim
# was configured with: the same environment and --config file, and the flags of PID 1.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["node", "dist/cli.js", "--healthcheck"]
# Exec form: node is PID 1 and receives SIGTERM itself (graceful shutdown, server.shutdownGraceMs).
ENTRYPOINT ["node", "dist/cli.js"]
