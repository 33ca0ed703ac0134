// A counter's value in a Prometheus exposition, summed over its series: what an engine's or the
// router's /metrics says, for tests that compare it with the ledger.

export function counterSum(text: string, name: string): number {
  let n = 0;
  for (const line of text.split("\n")) if (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) n += Number(line.slice(line.lastIndexOf(" ") + 1));
  return n;
}
