// Lets TypeScript see SQL migrations imported `with { type: "text" }` as strings.
declare module "*.sql" {
  const text: string;
  export default text;
}
