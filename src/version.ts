// The release this binary is. build.ts stamps it in; running from source says "-dev".

declare const __LLMGW_VERSION__: string | undefined;

export const VERSION: string = typeof __LLMGW_VERSION__ === "string" ? __LLMGW_VERSION__ : "0.1.0-dev";
