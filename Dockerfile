# zulip-compat-shim: a small image that runs the built CLI as a non-root user.
#   docker build -t zulip-compat-shim .
#   docker run --rm -p 9991:9991 -e UPSTREAM_URL=https://zulip.example.com zulip-compat-shim
#   docker run --rm -p 9991:9991 zulip-compat-shim --demo      (the bundled recording, to try it)
# Without an upstream (UPSTREAM_URL, --upstream, --replay or --demo) it exits 2 with one line.
# Every setting is a flag, an environment variable or a --config file (README "Configuration").
# Node 24 is the current LTS line; CI tests on Node 20 and later (package.json "engines").

FROM node:24-slim AS build
WORKDIR /app
# Scripts off: `prepare` would build before the sources are copied; the build runs below.
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY . .
# examples/ holds the demo recording; make sure it exists for the COPY of the next stage.
RUN npm run build && mkdir -p examples

FROM node:24-slim
ENV NODE_ENV=production \
    HOST=0.0.0.0
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force
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
