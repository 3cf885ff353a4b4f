// End-to-end tests of the Kubernetes deployment in deploy/k8s: every manifest against the
// Kubernetes, KEDA and Prometheus Operator schemas and against each other and kiln serve, then the
// ScaledObjects' PromQL queries, read from the manifests, evaluated by a real Prometheus scraping a
// real `kiln serve` through a burst of requests. Run by CTest (label e2e) with KILN_BINARY and
// KILN_E2E_DIR set; no cluster is needed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { E2E_DIR, startServer, stopServer, post, get, waitFor, freePort } from './server_helpers.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const DEPLOY = path.join(ROOT, 'deploy/k8s');
const OVERLAYS = ['base', 'overlays/gpu', 'overlays/scale-to-zero'];

function e2eRequire(name) {
  if (!E2E_DIR) throw new Error('KILN_E2E_DIR is not set; run tests/e2e/setup.sh DIR first');
  return createRequire(path.join(E2E_DIR, 'package.json'))(name);
}
const YAML = e2eRequire('yaml');

// The schema packages are ES modules without a require() entry: imported by file.
const MODELS = {
  'v1/Namespace': 'kubernetes-models/v1/Namespace.js',
  'v1/PersistentVolumeClaim': 'kubernetes-models/v1/PersistentVolumeClaim.js',
  'v1/Service': 'kubernetes-models/v1/Service.js',
  'apps/v1/Deployment': 'kubernetes-models/apps/v1/Deployment.js',
  'keda.sh/v1alpha1/ScaledObject': '@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject.js',
  'monitoring.coreos.com/v1/PodMonitor': '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor.js',
};

// Throws the schema's message when `obj` is not a valid object of its apiVersion and kind, or when
// it has a field the schema does not know (as `kubectl apply --validate=strict` refuses one). The
// schema packages' validators accept unknown fields, so the validator runs on a proxy of the object
// that records which properties it reads: a property never read, in an object whose keys the
// validator never enumerates (a map, such as labels, is enumerated), is not in the schema.
async function validateSchema(obj) {
  const key = `${obj.apiVersion}/${obj.kind}`;
  assert.ok(MODELS[key], `no schema for ${key} (${obj.metadata?.name}): add it to MODELS`);
  const module = await import(pathToFileURL(path.join(E2E_DIR, 'node_modules', MODELS[key])).href);
  const reads = new Map();  // object -> { keys: properties read, all: keys enumerated }
  const proxies = new Map();
  const wrap = (v) => {
    if (v === null || typeof v !== 'object') return v;
    if (!proxies.has(v)) {
      const rec = { keys: new Set(), all: false };
      reads.set(v, rec);
      proxies.set(v, new Proxy(v, {
        get: (t, k) => { rec.keys.add(k); return wrap(t[k]); },
        has: (t, k) => { rec.keys.add(k); return k in t; },
        ownKeys: (t) => { rec.all = true; return Reflect.ownKeys(t); },
      }));
    }
    return proxies.get(v);
  };
  const data = structuredClone(obj);
  module[obj.kind].prototype.validate.call(wrap(data));
  const unknown = [];
  const walk = (v, where) => {
    if (v === null || typeof v !== 'object') return;
    const rec = reads.get(v);
    if (!rec) return;  // free-form: the schema does not look inside
    for (const [k, child] of Object.entries(v)) {
      if (!Array.isArray(v) && !rec.all && !rec.keys.has(k)) unknown.push(`${where}/${k}`);
      walk(child, `${where}/${k}`);
    }
  };
  walk(data, '');
  if (unknown.length) throw new Error(`${key} ${obj.metadata?.name}: fields the schema does not know: ${unknown.join(', ')}`);
}

function parseDocuments(file) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
  for (const d of docs) {
    if (d.errors.length) throw new Error(`${file}: ${d.errors.map((e) => e.message).join('; ')}`);
  }
  return docs.map((d) => d.toJS()).filter((o) => o !== null);
}

// JSON patch (RFC 6902), as kustomize applies a patch that is a list of operations.
function applyJsonPatch(doc, ops, where) {
  for (const op of ops) {
    const keys = op.path.split('/').slice(1).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
    const last = keys.pop();
    let parent = doc;
    for (const k of keys) {
      parent = parent?.[k];
      if (parent === undefined) throw new Error(`${where}: ${op.op} ${op.path}: no such path`);
    }
    const isArray = Array.isArray(parent);
    const has = isArray ? Number(last) < parent.length : Object.hasOwn(parent, last);
    if (op.op !== 'add' && !has) throw new Error(`${where}: ${op.op} ${op.path}: no such path`);
    if (op.op === 'test') {
      assert.deepEqual(parent[last], op.value, `${where}: test ${op.path}`);
    } else if (op.op === 'add') {
      if (isArray) parent.splice(last === '-' ? parent.length : Number(last), 0, op.value);
      else parent[last] = op.value;
    } else if (op.op === 'replace') {
      parent[last] = op.value;
    } else if (op.op === 'remove') {
      if (isArray) parent.splice(Number(last), 1);
      else delete parent[last];
    } else {
      throw new Error(`${where}: unsupported JSON patch operation '${op.op}'`);
    }
  }
}

// The objects `kubectl apply -k dir` would send: resources (files and other kustomizations) with
// their JSON patches applied. Any other kustomize feature fails here rather than being ignored.
// `used` collects the resource files read.
function renderKustomization(dir, used = new Set()) {
  const file = path.join(dir, 'kustomization.yaml');
  const k = YAML.parse(fs.readFileSync(file, 'utf8'));
  for (const key of Object.keys(k)) {
    assert.ok(['apiVersion', 'kind', 'resources', 'patches'].includes(key),
      `${file}: '${key}' is a kustomize feature this test does not render; extend renderKustomization`);
  }
  const objects = [];
  for (const r of k.resources ?? []) {
    const p = path.resolve(dir, r);
    if (fs.statSync(p).isDirectory()) {
      objects.push(...renderKustomization(p, used));
    } else {
      used.add(p);
      objects.push(...parseDocuments(p));
    }
  }
  for (const [i, patch] of (k.patches ?? []).entries()) {
    const where = `${file}: patches[${i}]`;
    const ops = YAML.parse(patch.path ? fs.readFileSync(path.resolve(dir, patch.path), 'utf8') : patch.patch);
    assert.ok(Array.isArray(ops), `${where}: only JSON patches (lists of operations) are rendered here`);
    const targets = objects.filter((o) => (!patch.target?.kind || o.kind === patch.target.kind) &&
      (!patch.target?.name || o.metadata?.name === patch.target.name));
    assert.ok(targets.length > 0, `${where}: the target matches no object`);
    for (const t of targets) applyJsonPatch(t, ops, where);
  }
  return objects;
}

// The routes kiln serve answers, from the router's table (src/server/router.cpp).
function routerRoutes() {
  const text = fs.readFileSync(path.join(ROOT, 'src/server/router.cpp'), 'utf8');
  return [...text.matchAll(/\{"(\/[^"]*)",\s*"(GET|POST)"/g)].map((m) => m[1]);
}

// The value after `flag` in a container's args.
function flagValue(args, flag) {
  const i = args.indexOf(flag);
  return i >= 0 ? args[i + 1] : undefined;
}

// The main container: the one that runs `kiln serve`.
function kilnContainer(deployment) {
  return deployment.spec.template.spec.containers.find((c) => (c.args ?? [])[0] === 'serve');
}

// What the schemas cannot check: that the objects of one rendered kustomization refer to each
// other correctly and agree with kiln serve's routes and shutdown. Returns the problems found.
function crossCheck(objects, routes) {
  const problems = [];
  const of = (kind) => objects.filter((o) => o.kind === kind);
  const deployments = of('Deployment');
  if (deployments.length !== 1) return [`expected one Deployment, found ${deployments.length}`];
  const dep = deployments[0];
  const ns = dep.metadata.namespace;
  const pod = dep.spec.template;
  const labels = pod.metadata?.labels ?? {};
  const selects = (sel) => !!sel && Object.keys(sel).length > 0 && Object.entries(sel).every(([k, v]) => labels[k] === v);
  if (!selects(dep.spec.selector?.matchLabels)) problems.push('the Deployment\'s selector does not match its pod labels');

  const c = kilnContainer(dep);
  if (!c) return [...problems, 'no container runs `kiln serve`'];
  const ports = c.ports ?? [];
  const portOf = (ref) => ports.find((p) => p.name === ref || p.containerPort === ref);
  for (const [probe, route] of [['readinessProbe', '/v2/health/ready'], ['livenessProbe', '/v2/health/live'],
    ['startupProbe', null]]) {
    const g = c[probe]?.httpGet;
    if (!g) {
      if (route) problems.push(`${probe}: no httpGet`);
      continue;
    }
    if (route && g.path !== route) problems.push(`${probe}: path ${g.path}, expected ${route}`);
    if (!routes.includes(g.path)) problems.push(`${probe}: ${g.path} is not a route of src/server/router.cpp`);
    if (!portOf(g.port)) problems.push(`${probe}: port ${g.port} is not a container port`);
  }

  const args = c.args.map(String);
  const engine = args[1];
  const mount = (c.volumeMounts ?? []).find((m) => engine?.startsWith(m.mountPath.replace(/\/?$/, '/')));
  if (!mount) problems.push(`the engine ${engine} is not on a mounted volume`);
  else if (!mount.readOnly) problems.push(`the engine volume ${mount.name} is not mounted read-only`);
  else if (!(pod.spec.volumes ?? []).some((v) => v.name === mount.name)) problems.push(`no volume ${mount.name}`);
  if (flagValue(args, '--host') !== '0.0.0.0') problems.push('kiln serve does not listen on 0.0.0.0');
  const http = portOf(Number(flagValue(args, '--port')));
  if (!http) problems.push(`--port ${flagValue(args, '--port')} is not a container port`);

  // SIGTERM comes after preStop; kiln then waits --shutdown-grace (default 30 s) for running
  // requests and up to 5 s more for their last writes (src/cli/cmd_serve.cpp).
  const grace = Number(flagValue(args, '--shutdown-grace') ?? 30);
  const preStop = c.lifecycle?.preStop?.exec?.command;
  const preStopSeconds = preStop?.[0] === 'sleep' ? Number(preStop[1]) : NaN;
  if (!(preStopSeconds > 0)) problems.push('no preStop sleep: the Service could route to a pod that stopped accepting');
  const tgps = pod.spec.terminationGracePeriodSeconds ?? 30;
  if (!(tgps > preStopSeconds + grace + 5)) {
    problems.push(`terminationGracePeriodSeconds ${tgps} does not cover preStop ${preStopSeconds} s + --shutdown-grace ${grace} s + 5 s`);
  }
  const threads = flagValue(args, '--threads');
  if (threads !== undefined && String(c.resources?.limits?.cpu) !== threads) {
    problems.push(`--threads ${threads} differs from the CPU limit ${c.resources?.limits?.cpu}`);
  }
  const gpus = Number(c.resources?.limits?.['nvidia.com/gpu'] ?? 0);
  if ((flagValue(args, '--gpu-memory-fraction') !== undefined) !== (gpus >= 1)) {
    problems.push(`--gpu-memory-fraction and an nvidia.com/gpu limit (${gpus}) go together`);
  }

  for (const svc of of('Service')) {
    if (svc.metadata.namespace !== ns) problems.push(`Service ${svc.metadata.name} is not in ${ns}`);
    if (!selects(svc.spec.selector)) problems.push(`Service ${svc.metadata.name}'s selector does not match the pod labels`);
    for (const p of svc.spec.ports) {
      if (!portOf(p.targetPort ?? p.port)) problems.push(`Service port ${p.name}: targetPort ${p.targetPort} is not a container port`);
    }
  }
  const monitors = of('PodMonitor');
  if (monitors.length !== 1) problems.push(`expected one PodMonitor, found ${monitors.length}`);
  for (const pm of monitors) {
    const inNs = pm.spec.namespaceSelector?.any || (pm.spec.namespaceSelector?.matchNames ?? [pm.metadata.namespace]).includes(ns);
    if (!inNs) problems.push(`PodMonitor ${pm.metadata.name} does not look in namespace ${ns}`);
    if (!selects(pm.spec.selector?.matchLabels)) problems.push(`PodMonitor ${pm.metadata.name}'s selector does not match the pod labels`);
    if (pm.spec.jobLabel && !labels[pm.spec.jobLabel]) problems.push(`the pods have no ${pm.spec.jobLabel} label for the PodMonitor's jobLabel`);
    for (const e of pm.spec.podMetricsEndpoints ?? []) {
      if (!portOf(e.port)) problems.push(`PodMonitor endpoint port ${e.port} is not a container port`);
      if (!routes.includes(e.path ?? '/metrics')) problems.push(`PodMonitor path ${e.path} is not a route`);
    }
  }
  const scaled = of('ScaledObject');
  if (scaled.length !== 1) problems.push(`expected one ScaledObject, found ${scaled.length}`);
  for (const so of scaled) {
    const ref = so.spec.scaleTargetRef;
    if (so.metadata.namespace !== ns || ref.name !== dep.metadata.name || (ref.kind ?? 'Deployment') !== 'Deployment' ||
        (ref.apiVersion ?? 'apps/v1') !== 'apps/v1') {
      problems.push(`ScaledObject ${so.metadata.name} does not target Deployment ${ns}/${dep.metadata.name}`);
    }
    for (const t of so.spec.triggers) {
      if (t.type !== 'prometheus') continue;
      const m = t.metadata;
      if (!m.query) problems.push(`trigger ${t.name}: no query`);
      if (!(Number(m.threshold) > 0)) problems.push(`trigger ${t.name}: threshold ${m.threshold} is not a positive number`);
      if (m.activationThreshold !== undefined && !(Number(m.activationThreshold) >= 0)) problems.push(`trigger ${t.name}: bad activationThreshold`);
      for (const q of (m.query ?? '').matchAll(/\bnamespace="([^"]*)"/g)) {
        if (q[1] !== ns) problems.push(`trigger ${t.name}: the query selects namespace ${q[1]}, the pods run in ${ns}`);
      }
    }
  }
  return problems;
}

function yamlFiles(dir) {
  return fs.readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && /\.ya?ml$/.test(e.name))
    .map((e) => path.join(e.parentPath ?? e.path, e.name)).sort();
}

function renderAll() {
  const used = new Set();
  const rendered = Object.fromEntries(OVERLAYS.map((o) => [o, renderKustomization(path.join(DEPLOY, o), used)]));
  return { rendered, used };
}

test('every manifest parses and passes the Kubernetes, KEDA and Prometheus Operator schemas', async () => {
  const files = yamlFiles(DEPLOY);
  for (const f of files) parseDocuments(f);  // every document of every file parses
  const { rendered, used } = renderAll();
  // Every file is a kustomization or one of its resources: none escapes the checks below.
  const unused = files.filter((f) => path.basename(f) !== 'kustomization.yaml' && !used.has(f));
  assert.deepEqual(unused, [], 'files no kustomization renders');
  const kustomizations = files.filter((f) => path.basename(f) === 'kustomization.yaml').map((f) => path.relative(DEPLOY, path.dirname(f)));
  assert.deepEqual(kustomizations.sort(), [...OVERLAYS].sort(), 'every kustomization is rendered here');
  for (const [overlay, objects] of Object.entries(rendered)) {
    const kinds = objects.map((o) => o.kind).sort();
    assert.deepEqual(kinds, ['Deployment', 'Namespace', 'PersistentVolumeClaim', 'PodMonitor', 'ScaledObject', 'Service'], overlay);
    for (const o of objects) {
      await assert.doesNotReject(validateSchema(o), `${overlay}: ${o.kind} ${o.metadata.name}`);
    }
    console.log(`${overlay}: ${objects.map((o) => `${o.kind}/${o.metadata.name}`).join(', ')} valid`);
  }
});

test('the manifests agree with each other, with kiln serve\'s routes and with its shutdown', () => {
  const routes = routerRoutes();
  assert.ok(routes.includes('/v2/health/ready') && routes.includes('/metrics'), `routes read from router.cpp: ${routes}`);
  const { rendered } = renderAll();
  for (const [overlay, objects] of Object.entries(rendered)) {
    assert.deepEqual(crossCheck(objects, routes), [], overlay);
  }
  const gpu = kilnContainer(rendered['overlays/gpu'].find((o) => o.kind === 'Deployment'));
  assert.ok(Number(gpu.resources.limits['nvidia.com/gpu']) >= 1, 'the GPU overlay asks for a GPU');
  const cpu = kilnContainer(rendered.base.find((o) => o.kind === 'Deployment'));
  assert.equal(cpu.resources.limits['nvidia.com/gpu'], undefined, 'the base asks for none');
  const zero = rendered['overlays/scale-to-zero'].find((o) => o.kind === 'ScaledObject');
  assert.equal(zero.spec.minReplicaCount, 0);
  assert.ok(zero.spec.triggers.some((t) => t.metadata.activationThreshold !== undefined && /\brate\(/.test(t.metadata.query)),
    'the scale-to-zero overlay activates on a request rate');
});

test('the checks catch broken manifests', async () => {
  const routes = routerRoutes();
  const base = () => renderAll().rendered.base;
  const find = (objs, kind) => objs.find((o) => o.kind === kind);
  const schemaFails = async (mutate, expected) => {
    const objs = base();
    const o = mutate(objs);
    await assert.rejects(validateSchema(o), expected);
  };
  const crossFails = (mutate, expected) => {
    const objs = base();
    mutate(objs);
    const problems = crossCheck(objs, routes);
    assert.ok(problems.some((p) => expected.test(p)), `expected ${expected}, got ${JSON.stringify(problems)}`);
  };
  await schemaFails((o) => {
    const d = find(o, 'Deployment');
    d.spec.template.spec.containers[0].ports[0].containerPort = '8000';
    return d;
  }, /containerPort must be integer/);
  await schemaFails((o) => {
    const d = find(o, 'Deployment');
    delete d.spec.template.spec.containers[0].name;
    return d;
  }, /must have required property name/);
  await schemaFails((o) => {
    const s = find(o, 'ScaledObject');
    s.spec.triggers[0].metadata.threshold = 4;
    return s;
  }, /threshold must be string/);
  await schemaFails((o) => {
    const s = find(o, 'ScaledObject');
    delete s.spec.scaleTargetRef.name;
    return s;
  }, /scaleTargetRef must have required property name/);
  await schemaFails((o) => {
    const p = find(o, 'PodMonitor');
    p.spec.honorLabels = p.spec.podMetricsEndpoints[0].honorLabels;  // a field of each endpoint, not of spec
    return p;
  }, /fields the schema does not know: \/spec\/honorLabels/);
  await schemaFails((o) => {
    const d = find(o, 'Deployment');
    kilnContainer(d).readinesProbe = kilnContainer(d).readinessProbe;
    return d;
  }, /fields the schema does not know: \/spec\/template\/spec\/containers\/0\/readinesProbe/);
  await schemaFails((o) => {
    const p = find(o, 'PodMonitor');
    p.spec.podMetricsEndpoints[0].interval = '15 seconds';
    return p;
  }, /interval must match pattern/);
  crossFails((o) => { find(o, 'Service').spec.selector['app.kubernetes.io/name'] = 'kiln-server'; }, /Service kiln's selector/);
  crossFails((o) => { find(o, 'Service').spec.ports[0].targetPort = 'web'; }, /targetPort web is not a container port/);
  crossFails((o) => { kilnContainer(find(o, 'Deployment')).readinessProbe.httpGet.path = '/health/ready'; }, /readinessProbe: path/);
  crossFails((o) => { kilnContainer(find(o, 'Deployment')).livenessProbe.httpGet.port = 'metrics'; }, /livenessProbe: port metrics/);
  crossFails((o) => { find(o, 'Deployment').spec.template.spec.terminationGracePeriodSeconds = 60; }, /terminationGracePeriodSeconds 60/);
  crossFails((o) => { delete kilnContainer(find(o, 'Deployment')).lifecycle; }, /no preStop sleep/);
  crossFails((o) => { kilnContainer(find(o, 'Deployment')).volumeMounts[0].readOnly = false; }, /not mounted read-only/);
  crossFails((o) => { find(o, 'PodMonitor').spec.podMetricsEndpoints[0].port = 'metrics'; }, /PodMonitor endpoint port metrics/);
  crossFails((o) => { find(o, 'PodMonitor').spec.selector.matchLabels['app.kubernetes.io/instance'] = 'other'; }, /PodMonitor kiln's selector/);
  crossFails((o) => { find(o, 'ScaledObject').spec.scaleTargetRef.name = 'kiln-gpu'; }, /does not target Deployment/);
  crossFails((o) => {
    const t = find(o, 'ScaledObject').spec.triggers[0];
    t.metadata.query = t.metadata.query.replace(/namespace="[^"]*"/, 'namespace="default"');
  }, /selects namespace default/);
  // A patch whose `test` no longer holds fails the rendering instead of patching the wrong thing.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-kustomize-'));
  try {
    fs.cpSync(DEPLOY, dir, { recursive: true });
    const k = path.join(dir, 'overlays/gpu/kustomization.yaml');
    fs.writeFileSync(k, fs.readFileSync(k, 'utf8').replace('value: kiln\n', 'value: sidecar\n'));
    assert.throws(() => renderKustomization(path.join(dir, 'overlays/gpu')), /test \/spec\/template\/spec\/containers\/0\/name/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// The PromQL queries of every ScaledObject (base and overlays), each with the level it must cross:
// the base's triggers scale out at `threshold`; a trigger an overlay adds wakes the Deployment
// from zero above `activationThreshold` (KEDA's default: 0).
function scalingQueries() {
  const { rendered } = renderAll();
  const triggersOf = (overlay) => rendered[overlay].find((o) => o.kind === 'ScaledObject').spec.triggers
    .filter((t) => t.type === 'prometheus');
  const baseQueries = new Set(triggersOf('base').map((t) => t.metadata.query));
  const out = triggersOf('base').map((t) => ({ name: t.name, query: t.metadata.query, level: Number(t.metadata.threshold), kind: 'threshold' }));
  for (const overlay of OVERLAYS.filter((o) => o !== 'base')) {
    for (const t of triggersOf(overlay).filter((x) => !baseQueries.has(x.metadata.query))) {
      out.push({ name: t.name, query: t.metadata.query, level: Number(t.metadata.activationThreshold ?? 0), kind: 'activationThreshold' });
    }
  }
  return { out, rendered };
}

// How the Prometheus Operator scrapes a pod of the Deployment for the PodMonitor: the target labels
// job (the value of the pod label that jobLabel names, else namespace/name), namespace, pod,
// container and endpoint (the port's name), and the endpoint's honorLabels. The local Prometheus
// gives its static target the same labels and setting, so the manifests' queries, which select on
// namespace and job and on kiln's own endpoint label, run unchanged.
function podMonitorScrape(objects) {
  const dep = objects.find((o) => o.kind === 'Deployment');
  const pm = objects.find((o) => o.kind === 'PodMonitor');
  const labels = dep.spec.template.metadata.labels;
  const endpoint = pm.spec.podMetricsEndpoints[0];
  return {
    job: pm.spec.jobLabel ? labels[pm.spec.jobLabel] : `${pm.metadata.namespace}/${pm.metadata.name}`,
    honorLabels: endpoint.honorLabels ?? false,
    path: endpoint.path ?? '/metrics',
    labels: { namespace: dep.metadata.namespace, pod: `${dep.metadata.name}-0`, container: kilnContainer(dep).name, endpoint: endpoint.port },
  };
}

test('the ScaledObjects\' queries cross their thresholds in a real Prometheus during a burst', async () => {
  const { out: queries, rendered } = scalingQueries();
  assert.ok(queries.some((q) => /kiln_requests_waiting/.test(q.query)), 'a trigger on kiln_requests_waiting');
  const scrape = podMonitorScrape(rendered.base);
  // Two sequences at a time, so that a burst queues.
  const server = await startServer(['--max-num-seqs', '2']);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-deploy-prom-'));
  const promPort = await freePort();
  fs.writeFileSync(path.join(dir, 'prometheus.yml'), YAML.stringify({
    global: { scrape_interval: '1s', evaluation_interval: '1s' },
    scrape_configs: [{
      job_name: scrape.job, honor_labels: scrape.honorLabels, metrics_path: scrape.path,
      static_configs: [{ targets: [`127.0.0.1:${server.port}`], labels: scrape.labels }],
    }],
  }));
  const prom = spawn('prometheus', [
    `--config.file=${path.join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${path.join(dir, 'data')}`,
    `--web.listen-address=127.0.0.1:${promPort}`, '--log.level=warn',
  ], { stdio: 'ignore' });
  const promBase = `http://127.0.0.1:${promPort}`;
  // A query's value; an empty result counts as 0, as KEDA's ignoreNullValues (default true) does.
  // Null while Prometheus is not yet listening or answers 503 (its storage is still starting).
  const value = async (q) => {
    let r;
    try {
      r = await get(promBase, '/api/v1/query?query=' + encodeURIComponent(q));
    } catch {
      return null;
    }
    if (r.status === 503) return null;
    assert.equal(r.json?.status, 'success', `${q}: ${r.status} ${r.text}`);
    assert.ok(r.json.data.result.length <= 1, `${q} returns one series at most`);
    return r.json.data.result.length ? Number(r.json.data.result[0].value[1]) : 0;
  };
  const samples = [];  // { t, phase, values: one a query }
  let phase = 'starting';
  let sampling = true;
  const t0 = Date.now();
  const seconds = () => (Date.now() - t0) / 1000;
  // The sampler stops at its first error and keeps it; every wait below also ends when it stops.
  let samplerError = null;
  const sampler = (async () => {
    try {
      while (sampling) {
        const values = await Promise.all(queries.map((q) => value(q.query)));
        if (values.every((v) => v !== null)) samples.push({ t: seconds(), phase, values });
        await new Promise((r) => setTimeout(r, 1000));
      }
    } catch (e) {
      samplerError = e;
    }
  })();
  const checkSampler = () => { if (samplerError) throw samplerError; };
  const count = (p) => samples.filter((x) => x.phase === p).length;
  try {
    const up = await waitFor(async () => (await value(`up{job="${scrape.job}", namespace="${scrape.labels.namespace}"}`)) === 1,
      { timeoutMs: 60000, stepMs: 250 });
    assert.ok(up, 'prometheus scrapes kiln serve as the PodMonitor would');
    phase = 'before';
    const twoBefore = await waitFor(() => samplerError || count('before') >= 2, { timeoutMs: 20000, stepMs: 100 });
    checkSampler();
    assert.ok(twoBefore, 'two samples before the burst');
    // The burst: 12 clients, each sending short generations back to back for 6 s (and until three
    // samples were taken), keep about 10 requests waiting however fast the machine is.
    phase = 'burst';
    const clients = 12;
    const until = Date.now() + 6000;
    const deadline = until + 60000;  // however slow the sampler, the burst ends
    const statuses = [];
    await Promise.all(Array.from({ length: clients }, async (_, c) => {
      for (let i = 0; Date.now() < until || (count('burst') < 3 && !samplerError && Date.now() < deadline); ++i) {
        const r = await post(server.base, '/v1/completions',
          { prompt: `Client ${c}, request ${i}: it is a truth universally`, max_tokens: 16, ignore_eos: true });
        statuses.push(r.status);
      }
    }));
    const burstEnd = seconds();
    checkSampler();
    assert.ok(count('burst') >= 3, `three samples during the burst (${count('burst')} taken)`);
    assert.deepEqual(statuses, Array(statuses.length).fill(200), 'every request of the burst is answered');
    // After: until every query is back at or under its level (a rate waits for its window to pass).
    phase = 'after';
    const settled = await waitFor(() => {
      const last = samples.at(-1);
      return samplerError || (last.phase === 'after' && queries.every((q, i) => last.values[i] <= q.level));
    }, { timeoutMs: 100000, stepMs: 250 });
    sampling = false;
    await sampler;
    checkSampler();
    console.log(`burst: ${statuses.length} requests from ${clients} clients, ${burstEnd.toFixed(1)} s after start; samples as time:value`);
    for (const [i, q] of queries.entries()) {
      console.log(`${q.name} (${q.kind} ${q.level}): ${q.query}`);
      for (const p of ['before', 'burst', 'after']) {
        console.log(`  ${p}: ${samples.filter((x) => x.phase === p).map((x) => `${x.t.toFixed(1)}:${+x.values[i].toFixed(3)}`).join(' ')}`);
      }
    }
    assert.ok(settled, 'every query falls back to its level after the burst');
    for (const [i, q] of queries.entries()) {
      const of = (p) => samples.filter((x) => x.phase === p).map((x) => x.values[i]);
      assert.ok(of('before').every((v) => v <= q.level), `${q.name} is at or under its ${q.kind} before the burst`);
      assert.ok(Math.max(...of('burst'), ...of('after')) > q.level, `${q.name} crosses its ${q.kind} ${q.level}`);
      assert.ok(samples.at(-1).values[i] <= q.level, `${q.name} is back at or under its ${q.kind} after`);
    }
    const waiting = queries.findIndex((q) => /kiln_requests_waiting/.test(q.query));
    assert.ok(Math.max(...samples.filter((x) => x.phase === 'burst').map((x) => x.values[waiting])) > queries[waiting].level,
      'waiting requests cross the threshold while the burst runs');
  } finally {
    sampling = false;
    await sampler;
    prom.kill('SIGTERM');
    await new Promise((r) => (prom.exitCode !== null ? r() : prom.on('exit', r)));
    assert.equal(await stopServer(server), 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
