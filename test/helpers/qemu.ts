// Running the arm64 release binary on an x64 machine under QEMU's user-mode emulation (Debian's
// qemu-user-static, with the arm64 C library of libc6-arm64-cross: test/setup.ts installs both).
//
// The binary is run directly, through the kernel's binfmt_misc handler for aarch64 ELF files,
// not as `qemu-aarch64-static BINARY`: the agent starts its fake engine by executing itself
// again (process.execPath), which only an aarch64 handler in the kernel can run. A container
// may come without binfmt_misc mounted or the handler registered (Debian's postinst registers
// it only where binfmt_misc is there), so ensureAarch64Binfmt() mounts and registers it with
// Debian's own definition, whose F flag opens the emulator once, at registration, so it works
// in every mount namespace. The dynamically linked binary finds its loader and libraries under
// QEMU_LD_PREFIX, which the agent's engines inherit with the rest of its environment.

import { existsSync, readFileSync, writeFileSync } from "node:fs";

export const QEMU = "qemu-aarch64-static";
/** Where libc6-arm64-cross puts the arm64 loader and C library. */
export const AARCH64_SYSROOT = "/usr/aarch64-linux-gnu";
/** The environment an arm64 binary (and whatever it starts) needs to run emulated. */
export const AARCH64_ENV = { QEMU_LD_PREFIX: AARCH64_SYSROOT };

const BINFMT = "/proc/sys/fs/binfmt_misc";
const DEBIAN_DEFINITION = "/usr/lib/binfmt.d/qemu-aarch64.conf";
const SETUP = "run `bun test/setup.ts` (as root) to install qemu-user-static and libc6-arm64-cross";

/** Makes aarch64 executables run here; throws naming what is missing and what to do. */
export function ensureAarch64Binfmt(): void {
  if (!Bun.which(QEMU)) throw new Error(`${QEMU} is not on PATH: ${SETUP}`);
  if (!existsSync(`${AARCH64_SYSROOT}/lib/ld-linux-aarch64.so.1`)) throw new Error(`${AARCH64_SYSROOT}/lib/ld-linux-aarch64.so.1 is missing: ${SETUP}`);
  if (!existsSync(`${BINFMT}/status`)) {
    const m = Bun.spawnSync(["mount", "-t", "binfmt_misc", "binfmt_misc", BINFMT], { stdout: "pipe", stderr: "pipe" });
    if (m.exitCode !== 0) {
      throw new Error(`binfmt_misc is not mounted on ${BINFMT} and mounting it failed (${m.stderr.toString().trim()}): the arm64 tests need root with CAP_SYS_ADMIN, or a host that registered qemu-aarch64 (\`update-binfmts --enable qemu-aarch64\`)`);
    }
  }
  if (existsSync(`${BINFMT}/qemu-aarch64`)) {
    if (!readFileSync(`${BINFMT}/qemu-aarch64`, "utf8").startsWith("enabled")) writeFileSync(`${BINFMT}/qemu-aarch64`, "1");
    return;
  }
  if (!existsSync(DEBIAN_DEFINITION)) throw new Error(`${DEBIAN_DEFINITION} is missing: ${SETUP}`);
  try {
    writeFileSync(`${BINFMT}/register`, readFileSync(DEBIAN_DEFINITION, "utf8").trim());
  } catch (e) {
    // Another test file registering at the same moment wins the race: that is as good.
    if (!existsSync(`${BINFMT}/qemu-aarch64`)) throw new Error(`registering qemu-aarch64 with binfmt_misc failed: ${(e as Error).message} (needs root)`);
  }
}
