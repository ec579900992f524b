import { describe, expect, it } from 'vitest';
import {
  BadRequestError,
  BodyTimeoutError,
  BodyTooLargeError,
  bodyStalled,
  bodyTimedOut,
  bodyTooLarge,
  badRequest,
  MalformedRequestError,
  malformedRequest,
  MethodNotAllowedError,
  NoRecordedAnswerError,
  NotFoundError,
  ShimError,
} from '../src/http/errors.js';

/** One class per failure (as undici's core errors): a caller tells them apart with instanceof, each with its one status. */
describe('the shim refusals of a client request', () => {
  it.each([
    [badRequest('x'), BadRequestError, 400],
    [new NotFoundError(), NotFoundError, 404],
    [new MethodNotAllowedError('CONNECT is not supported'), MethodNotAllowedError, 405],
    [bodyTimedOut(1_000), BodyTimeoutError, 408],
    [bodyStalled(1024, 1_000), BodyTimeoutError, 408],
    [bodyTooLarge(10), BodyTooLargeError, 413],
    [malformedRequest(431), MalformedRequestError, 431],
    [malformedRequest(400), MalformedRequestError, 400],
  ] as const)('%o is its own class, answered with code BAD_REQUEST', (err, type, status) => {
    expect(err).toBeInstanceOf(type);
    expect(err).toBeInstanceOf(ShimError);
    expect([err.status, err.code]).toEqual([status, 'BAD_REQUEST']);
  });

  it('the classes are distinct: a body refusal is not a bad request', () => {
    expect(bodyTooLarge(10)).not.toBeInstanceOf(BadRequestError);
    expect(bodyTimedOut(10)).not.toBeInstanceOf(BodyTooLargeError);
    expect(malformedRequest(431).message).toBe('Malformed HTTP request: Request Header Fields Too Large');
  });

  it("replay's miss has its own name, not the testing API's ReplayMissError", () => {
    const err = new NoRecordedAnswerError('GET /x');
    expect([err.status, err.code, err.message]).toEqual([502, 'REPLAY_MISS', 'No recorded answer for GET /x']);
  });
});
