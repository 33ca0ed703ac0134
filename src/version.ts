// The release this binary is and the commit it was built from. build.ts stamps both in;
// running from source says "-dev" and an unknown commit.

declare const __LLMGW_VERSION__: string | undefined;
declare const __LLMGW_COMMIT__: string | undefined;

export const VERSION: string = typeof __LLMGW_VERSION__ === "string" ? __LLMGW_VERSION__ : "0.1.0-dev";
export const COMMIT: string = typeof __LLMGW_COMMIT__ === "string" ? __LLMGW_COMMIT__ : "unknown";
