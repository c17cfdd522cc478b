'use strict';
// Kubernetes and prometheus-operator schema checks for rendered objects.
//
// kubernetes-models carries each API type's OpenAPI schema compiled to an ajv validator. The
// OpenAPI documents declare no additionalProperties, so on their own they accept unknown
// fields, which the API server's strict field validation (kubectl's default) rejects. The
// validators read every property they know through the object, so the object is wrapped in a
// Proxy that records each property read: a field the validator never read is one its schema
// does not define.

// apiVersion -> module of its model classes (resolved through the project-local npm folder).
const MODULES = {
  'v1': 'kubernetes-models/v1',
  'apps/v1': 'kubernetes-models/apps/v1',
  'policy/v1': 'kubernetes-models/policy/v1',
  'autoscaling/v2': 'kubernetes-models/autoscaling/v2',
  'networking.k8s.io/v1': 'kubernetes-models/networking.k8s.io/v1',
  'rbac.authorization.k8s.io/v1': 'kubernetes-models/rbac.authorization.k8s.io/v1',
  'monitoring.coreos.com/v1': '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1',
};

function modelClass(requireFn, apiVersion, kind) {
  const mod = MODULES[apiVersion];
  if (!mod) return null;
  const cls = requireFn(mod)[kind];
  return typeof cls === 'function' && typeof cls.prototype.validate === 'function' ? cls : null;
}

// Wraps obj so that every own property read is recorded, one record per object (a validator
// reads a property several times: once to test for it, once to validate it).
function trackReads(root) {
  const seen = [];
  const proxies = new WeakMap();
  const wrap = (value, pointer) => {
    if (value === null || typeof value !== 'object') return value;
    if (proxies.has(value)) return proxies.get(value);
    const record = { value, pointer, read: new Set() };
    seen.push(record);
    const proxy = new Proxy(value, {
      get(target, key, receiver) {
        const v = Reflect.get(target, key, receiver);
        if (typeof key === 'string' && Object.prototype.hasOwnProperty.call(target, key)) {
          record.read.add(key);
          return wrap(v, `${pointer}/${key}`);
        }
        return v;
      },
    });
    proxies.set(value, proxy);
    return proxy;
  };
  return { proxy: wrap(root, ''), seen };
}

// Errors (strings) for one object: schema violations and unknown fields.
function validateObject(requireFn, object) {
  const { apiVersion, kind } = object;
  const cls = modelClass(requireFn, apiVersion, kind);
  if (!cls) return [`no schema for ${apiVersion} ${kind} (not a type this chart should render)`];
  const errors = [];
  const { proxy, seen } = trackReads(object);
  try {
    cls.prototype.validate.call(proxy);
  } catch (e) {
    errors.push(String(e.message || e).replace(/^data/, ''));
    return errors; // a failed validation stops reading early: unknown-field results would be noise
  }
  for (const record of seen) {
    if (Array.isArray(record.value)) continue;
    for (const key of Object.keys(record.value)) {
      if (!record.read.has(key)) errors.push(`${record.pointer}/${key}: unknown field`);
    }
  }
  return errors;
}

module.exports = { validateObject, MODULES };
