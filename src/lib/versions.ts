// PEP 440 versions, as vLLM and SGLang number their releases: read and compared where a version
// decides something, the agent's launch templates (agent/engines.ts) and what the head node
// judges a node's engine able to serve (protocol/engine-features.ts).

/** A PEP 440 release such as vLLM's "0.10.1.1", "0.11.1rc2", "0.6.3.post1" or "0.11.1.dev5+g1234abc". */
export const PEP440 = /^v?(\d+(?:\.\d+)*)(?:[._-]?(a|b|rc|alpha|beta|c)[._-]?(\d*))?(?:[._-]?post[._-]?(\d*))?(?:[._-]?dev[._-]?(\d*))?(?:\+[A-Za-z0-9.]+)?$/i;

type Pep440 = { release: number[]; phase: number; n: number };

function parsePep440(v: string): Pep440 | null {
  const m = PEP440.exec(v.trim());
  if (!m) return null;
  const release = m[1]!.split(".").map(Number);
  // Order within one release: dev < pre-release < final < post.
  if (m[4] !== undefined) return { release, phase: 2, n: Number(m[4] || 0) };
  if (m[2] !== undefined) return { release, phase: -1, n: Number(m[3] || 0) };
  if (m[5] !== undefined) return { release, phase: -2, n: Number(m[5] || 0) };
  return { release, phase: 0, n: 0 };
}

/**
 * Compares two PEP 440 versions (vLLM, SGLang): negative when a is older, 0 when equal,
 * positive when newer; null when either cannot be read. A pre-release or dev build of X counts
 * as older than X, so a template that needs X is not used on a build that may lack it.
 */
export function compareVersions(a: string, b: string): number | null {
  const x = parsePep440(a);
  const y = parsePep440(b);
  if (!x || !y) return null;
  for (let i = 0; i < Math.max(x.release.length, y.release.length); i++) {
    const d = (x.release[i] ?? 0) - (y.release[i] ?? 0);
    if (d !== 0) return d;
  }
  return x.phase !== y.phase ? x.phase - y.phase : x.n - y.n;
}
