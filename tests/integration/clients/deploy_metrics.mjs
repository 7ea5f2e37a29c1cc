// The metric names deploy/grafana/tollgate.json and deploy/prometheus/alerts.yml rely on, and the
// names a /metrics body exposes, so tests can check that the operator's files cannot rot.
import fs from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../..');

// Every family a Prometheus text body declares (# TYPE lines), with a histogram's series names.
export function exposedMetrics(body) {
  const exposed = new Set();
  for (const line of body.split('\n')) {
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (!t) continue;
    exposed.add(t[1]);
    if (t[2] === 'histogram') for (const sfx of ['_bucket', '_sum', '_count']) exposed.add(t[1] + sfx);
  }
  return exposed;
}

// [{file, text, names}] for the dashboard (its panels' queries and the rest of the JSON) and the
// alert rules; `panels` and `alerts` count what each file holds.
export function deployFiles() {
  const dashboard = fs.readFileSync(path.join(ROOT, 'deploy/grafana/tollgate.json'), 'utf8');
  const alerts = fs.readFileSync(path.join(ROOT, 'deploy/prometheus/alerts.yml'), 'utf8');
  const panels = JSON.parse(dashboard).panels;
  const exprs = panels.flatMap((p) => p.targets.map((t) => t.expr));
  const named = (text) => new Set(text.match(/\btollgate_[a-z0-9_]+/g) ?? []);
  return {
    panels: panels.length,
    alerts: (alerts.match(/^\s+- alert: /mg) ?? []).length,
    files: [
      { file: 'tollgate.json', names: named(exprs.join('\n') + dashboard) },
      { file: 'alerts.yml', names: named(alerts) },
    ],
  };
}

// Cluster metrics exist only on a node with a [cluster] section.
export const isClusterMetric = (name) => name.startsWith('tollgate_cluster_');
