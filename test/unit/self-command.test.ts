// The binary as the user ran it, for the commands the demo prints: the path as typed, which works
// from the same directory, or `bun` and the script when run from source.

import { expect, test } from "bun:test";
import { selfCommand, shellWord } from "../../src/cli/demo";

const compiled = "/$bunfs/root/llmgw";

test("a compiled binary: the path as typed", () => {
  expect(selfCommand({ argv0: "./dist/llmgw", main: compiled, cwd: "/home/me/llmgw" })).toBe("./dist/llmgw");
  expect(selfCommand({ argv0: "llmgw", main: compiled, cwd: "/tmp" })).toBe("llmgw");
  expect(selfCommand({ argv0: "/opt/llm gw/llmgw", main: compiled, cwd: "/tmp" })).toBe("'/opt/llm gw/llmgw'");
  expect(selfCommand({ argv0: "", main: compiled, cwd: "/tmp" })).toBe("llmgw");
});

test("from source: bun and the script, from where the user is", () => {
  expect(selfCommand({ argv0: "bun", main: "/home/me/llmgw/src/main.ts", cwd: "/home/me/llmgw" })).toBe("bun src/main.ts");
});

test("shellWord quotes only what needs it", () => {
  expect(shellWord("./llmgw-data")).toBe("./llmgw-data");
  expect(shellWord("my data")).toBe("'my data'");
  expect(shellWord("it's")).toBe("'it'\\''s'");
});
