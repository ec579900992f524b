// Express 4, installed beside Express 5 as `express4` (npm:express@4) for the middleware's tests;
// typed with Express 5's types, which describe what the tests use of it.
declare module 'express4' {
  import express from 'express';
  export default express;
}
