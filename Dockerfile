# zulip-compat-shim: a small image that runs the built CLI as a non-root user.
#   docker build -t zulip-compat-shim .
#   docker run --rm -p 9991:9991 -e UPSTREAM_URL=https://zulip.example.com zulip-compat-shim
# Every setting is a flag, an environment variable or a --config file (README "Configuration").

FROM node:20-slim AS build
WORKDIR /app
# Scripts off: `prepare` would build before the sources are copied; the build runs below.
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY . .
# examples/ holds the demo recording; make sure it exists for the COPY of the next stage.
RUN npm run build && mkdir -p examples

FROM node:20-slim
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
# Node itself checks /healthz, so the image needs no curl. Set the port with PORT, not --port.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["node", "-e", "require('node:http').get({host:'127.0.0.1',port:process.env.PORT||9991,path:'/healthz',timeout:4000},(r)=>process.exit(r.statusCode===200?0:1)).on('error',()=>process.exit(1)).on('timeout',()=>process.exit(1))"]
# Exec form: node is PID 1 and receives SIGTERM itself (graceful shutdown, server.shutdownGraceMs).
ENTRYPOINT ["node", "dist/cli.js"]
