// A sink for test/bench/body-flood.ts's baseline: it takes request bodies as the router's
// listener takes them and does nothing with them. A body whose Content-Length is over --cap is
// answered 413 after its head and the rest discarded until the client closes (the router's
// listener closes gracefully, reading on); any other is read whole and answered 404. Flooding it
// instead of the router puts the same bytes through the same loopback and the same kind of
// reads, so the ordinary client's latency then is what the flood costs the machine (CPU, the
// kernel's network path) whatever the router does. Prints its URL.
//   bun test/bench/lib/body-sink.ts --cap BYTES

const i = process.argv.indexOf("--cap");
const cap = i >= 0 ? Number(process.argv[i + 1]) : 4 * 1024 * 1024;
const enc = new TextEncoder();
const answer = (status: number) => enc.encode(`HTTP/1.1 ${status} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}`);

interface State {
  head: string;
  /** Body bytes still to come before the answer; -1: answered, discarding. */
  need: number;
}

const server = Bun.listen<State>({
  hostname: "127.0.0.1",
  port: 0,
  socket: {
    open(s) {
      s.data = { head: "", need: 0 };
    },
    data(s, d) {
      const st = s.data;
      if (st.need < 0) return;
      if (st.need === 0) {
        st.head += Buffer.from(d).toString("latin1");
        const end = st.head.indexOf("\r\n\r\n");
        if (end < 0) return;
        const len = Number(/\r\ncontent-length:\s*(\d+)/i.exec(st.head)?.[1] ?? 0);
        if (len > cap) {
          st.need = -1;
          s.write(answer(413));
          s.shutdown(true);
          return;
        }
        st.need = len - (st.head.length - end - 4);
      } else st.need -= d.byteLength;
      if (st.need <= 0) {
        st.need = -1;
        s.write(answer(404));
        s.shutdown(true);
      }
    },
  },
});
console.log(`body sink listening on http://127.0.0.1:${server.port}`);
