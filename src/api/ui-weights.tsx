// The dashboard's view of a model's weights: per node its copy of the model's pinned revision,
// present, fetching (how far, how fast, from where) or absent, as `llmgw describe model` shows it.

import type { FC } from "hono/jsx";
import { bytes, human } from "../lib/format";
import type { WeightsNodeView } from "../protocol/weights-admin";
import { Badge, Section, nodeHref } from "./ui-view";

const tone = (s: WeightsNodeView["state"]) => (s === "present" ? "ok" : s === "blocked" ? "bad" : s === "absent" || s === "partial" ? "muted" : "warn");

export const WeightsSection: FC<{ nodes: readonly WeightsNodeView[] }> = ({ nodes }) => (
  <Section id="weights" title="Weights on nodes" note="the model's pinned revision, fetched from the Hub once per fabric" count={nodes.filter((n) => n.state === "present").length}>
    <div class="scroll">
      <table>
        <thead>
          <tr>
            <th>Node</th>
            <th>State</th>
            <th class="num">Progress</th>
            <th class="num">Rate</th>
            <th>From</th>
          </tr>
        </thead>
        <tbody>
          {nodes.map((n) => (
            <tr data-testid="weights-row" data-node={n.node} data-state={n.state}>
              <td class="name">
                <a href={nodeHref(n.node)}>{n.node}</a>
              </td>
              <td>
                <Badge tone={tone(n.state)} field="weights">
                  {n.state}
                </Badge>
              </td>
              <td class="num">{n.percent === null ? "-" : `${n.percent} %${n.estimate_seconds !== null ? ` (~${human(n.estimate_seconds)})` : ""}`}</td>
              <td class="num">{n.rate === null ? "-" : `${bytes(n.rate)}/s`}</td>
              <td>{n.from.length > 0 ? n.from.join(", ") : (n.reason ?? "-")}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  </Section>
);
