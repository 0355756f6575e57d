<?php

declare(strict_types=1);

namespace Baton;

use Baton\Exception\BatonException;
use Baton\Exception\ExceptionInterface;
use Baton\Exception\InvalidArgumentException;
use Baton\Exception\LeaseLostException;
use Baton\Exception\LockHeldException;
use Baton\Internal\Duration;
use Baton\Internal\Guard;
use Baton\Internal\Problems;
use Baton\Internal\Transport;

/**
 * Client talks to one Baton server: it takes locks (acquire, synchronized),
 * makes sessions, and reads a lock's state. Durations are float seconds.
 *
 * Every POST carries an Idempotency-Key, and a call whose answer was lost (a
 * transport error, or a 502, 503 or 504) is sent again with the same key and
 * body, so a lost answer never leaves a hold behind; 429 and 503 are retried
 * after their Retry-After. Retries go on for `retryFor` seconds (plus the
 * call's wait); 401 and 403 are never retried.
 *
 * The API key is never printed: not by var_dump or print_r of the client, nor
 * in any exception.
 */
final class Client
{
    /** The server used when neither the url argument nor BATON_URL names one. */
    public const DEFAULT_URL = 'http://localhost:8080';

    private const NAME = '/^[A-Za-z0-9._:-]{1,200}$/';

    private Transport $transport;

    /**
     * @param string|null $url      the server; null: BATON_URL, else http://localhost:8080
     * @param string|null $apiKey   sent as `Authorization: Bearer`; null: BATON_API_KEY, else none
     * @param float       $timeout  seconds to connect, and for an answer beyond the call's own wait
     * @param float       $retryFor seconds to keep retrying a call that got no answer, 429, 502, 503 or 504
     * @param float       $longPoll the longest wait one request asks of the server (longer waits are
     *                              several requests); keep it under your proxies' read timeouts and
     *                              the server's BATON_MAX_WAIT
     */
    public function __construct(
        ?string $url = null,
        #[\SensitiveParameter] ?string $apiKey = null,
        float $timeout = 10.0,
        float $retryFor = 10.0,
        private readonly float $longPoll = 20.0
    ) {
        $url ??= self::env('BATON_URL') ?? self::DEFAULT_URL;
        $this->transport = new Transport(rtrim($url, '/'), $apiKey ?? self::env('BATON_API_KEY'), $timeout, $retryFor);
    }

    /**
     * Takes the lock $name for $ttl seconds, waiting up to $wait seconds (INF:
     * as long as it takes). With $fair, waits in the lock's FIFO queue, and
     * leaves it when the wait runs out. With $shared, takes a shared hold
     * (shared holds coexist, up to $limit of them).
     *
     * @throws LockHeldException when not granted within $wait
     * @throws BatonException    on any other failure (see Baton\Exception)
     */
    public function acquire(
        string $name,
        float $ttl = 30.0,
        float $wait = 10.0,
        bool $fair = false,
        bool $shared = false,
        ?int $limit = null,
        ?string $owner = null
    ): Lease {
        $base = ['ttl_ms' => Duration::ms($ttl, 'ttl')];

        return $this->obtain($name, $base, $wait, $fair, $shared, $limit, $owner, null);
    }

    /**
     * Runs $fn while holding the lock $name and returns what it returns; the
     * lock is released on every way out: a return, an exception, exit(). $fn
     * gets the Lease (for its fence, or to renew it during long work).
     *
     * @template T
     *
     * @param callable(Lease): T $fn
     *
     * @return T
     *
     * @throws LockHeldException  when not granted within $wait
     * @throws LeaseLostException when $fn returned but the hold had been lost
     *                            meanwhile (it ran out or was forced): what it
     *                            guarded was not guarded to the end
     * @throws BatonException     on any other failure
     */
    public function synchronized(
        string $name,
        callable $fn,
        float $ttl = 30.0,
        float $wait = 10.0,
        bool $fair = false,
        bool $shared = false,
        ?int $limit = null,
        ?string $owner = null
    ): mixed {
        $lease = $this->acquire($name, $ttl, $wait, $fair, $shared, $limit, $owner);

        return self::scoped($fn, $lease, static fn () => $lease->release());
    }

    /**
     * Makes a session of $ttl seconds: holds taken with Session::acquire() are
     * renewed and released together.
     *
     * @throws BatonException
     */
    public function session(float $ttl = 30.0, ?string $owner = null): Session
    {
        $body = ['ttl_ms' => Duration::ms($ttl, 'ttl')];
        if ($owner !== null) {
            $body['owner'] = $owner;
        }
        $r = $this->transport->send('POST', '/v1/sessions', $body, 0.0, 'make a session');
        if ($r->status !== 201) {
            throw Problems::exception($r, 'make a session', null);
        }

        return new Session($this, $this->transport, $r->body());
    }

    /**
     * Runs $fn with a new session and returns what it returns; the session
     * (and every hold in it) ends on every way out: a return, an exception,
     * exit().
     *
     * @template T
     *
     * @param callable(Session): T $fn
     *
     * @return T
     *
     * @throws BatonException
     */
    public function withSession(callable $fn, float $ttl = 30.0, ?string $owner = null): mixed
    {
        $session = $this->session($ttl, $owner);

        return self::scoped($fn, $session, static fn () => $session->close());
    }

    /**
     * The state of the lock $name: `held`, `mode`, `holders`, `fence`,
     * `owner`, `ttl_ms`, `waiters`, `holds`, ... (never a lease id). With $wait,
     * waits up to that many seconds for the lock to change from the state with
     * $fence (default: its fence now).
     *
     * @return array<string, mixed>
     *
     * @throws BatonException
     */
    public function state(string $name, float $wait = 0.0, ?int $fence = null): array
    {
        $op = sprintf('read the state of "%s"', $name);
        $path = self::lockPath($name);
        $deadline = microtime(true) + Duration::ms($wait, 'wait') / 1000;
        if ($wait > 0 && $fence === null) {
            // Pin the fence, so that a watch cut short by a proxy can be sent
            // again for the same state.
            $now = $this->state($name);
            if (empty($now['held'])) {
                return $now;
            }
            $fence = (int) ($now['fence'] ?? 0);
        }
        while (($remaining = $deadline - microtime(true)) > 0) {
            $chunk = min($remaining, $this->longPoll);
            $query = http_build_query(['wait_ms' => Duration::ms($chunk, 'wait'), 'fence' => $fence]);
            $sent = microtime(true);
            $r = $this->transport->send('GET', $path . '?' . $query, null, $chunk, $op, $name, false);
            if ($r->status === 200) {
                $state = $r->body();
                // Back before its wait (a change), or the last part of the wait: done.
                $early = microtime(true) - $sent < $chunk - 0.05;
                if ($chunk >= $remaining || $early || ($state['fence'] ?? null) !== $fence) {
                    return $state;
                }
            } elseif ($r->status === 502 || $r->status === 504) { // a proxy cut the watch short: watch again
                $left = $chunk - (microtime(true) - $sent);
                if ($left > 0) {
                    usleep((int) (min($left, 0.25) * 1e6)); // not at once, should it answer at once
                }
            } else {
                throw Problems::exception($r, $op, $name);
            }
        }
        $r = $this->transport->send('GET', $path, null, 0.0, $op, $name);
        if ($r->status !== 200) {
            throw Problems::exception($r, $op, $name);
        }

        return $r->body();
    }

    /**
     * Releases every hold of the lock $name, whoever holds it (needs the
     * `admin` action); the queue gets it next. Returns whether anything was
     * held.
     *
     * @throws BatonException
     */
    public function forceRelease(string $name): bool
    {
        $op = sprintf('force-release "%s"', $name);
        $r = $this->transport->send('DELETE', self::lockPath($name) . '?force=true', null, 0.0, $op, $name);
        if ($r->status !== 200) {
            throw Problems::exception($r, $op, $name);
        }

        return (bool) ($r->body()['released'] ?? false);
    }

    /**
     * Joins the fair queue of $name without waiting: the Lease when granted at
     * once, else a Ticket to poll (from this process or a later one, within
     * its ticketTtl()) or cancel.
     *
     * @throws BatonException
     */
    public function enqueue(
        string $name,
        float $ttl = 30.0,
        bool $shared = false,
        ?int $limit = null,
        ?string $owner = null
    ): Lease|Ticket {
        $body = $this->acquireBody(['ttl_ms' => Duration::ms($ttl, 'ttl')], $shared, $limit, $owner);

        return $this->post($name, $body + ['fair' => true], sprintf('join the queue of "%s"', $name), null);
    }

    /**
     * The lease at $url (a Lease's url, kept from an earlier process), asking
     * Baton that it is still held.
     *
     * @throws LeaseLostException when it is not
     * @throws BatonException
     */
    public function lease(string $url): Lease
    {
        $name = self::nameIn($url, 'leases');
        $op = sprintf('check "%s"', $name);
        $r = $this->transport->send('GET', $url, null, 0.0, $op, $name);
        if ($r->status !== 200) {
            throw Problems::exception($r, $op, $name);
        }

        return new Lease($this->transport, $r->body());
    }

    /**
     * The ticket at $url (a Ticket's url, kept from an earlier process); poll
     * it to learn its place or get the lease.
     */
    public function ticket(string $url): Ticket
    {
        $fields = ['name' => self::nameIn($url, 'tickets'), 'url' => $url];

        return new Ticket($this->transport, $fields, null, $this->longPoll);
    }

    /**
     * A Lease from Lease::toArray(), without asking the server.
     *
     * @param array<string, mixed> $fields
     */
    public function restoreLease(array $fields): Lease
    {
        self::nameIn((string) ($fields['url'] ?? ''), 'leases');

        return new Lease($this->transport, $fields);
    }

    /**
     * Acquires for Client::acquire() and Session::acquire(): $base holds
     * `ttl_ms` or `session`.
     *
     * @param array<string, mixed> $base
     *
     * @internal
     */
    public function obtain(
        string $name,
        array $base,
        float $wait,
        bool $fair,
        bool $shared,
        ?int $limit,
        ?string $owner,
        ?Session $session
    ): Lease {
        if (is_nan($wait) || $wait < 0) {
            throw new InvalidArgumentException('wait must be a number of seconds >= 0 (INF: no limit)');
        }
        if (!($this->longPoll > 0) || is_infinite($this->longPoll)) {
            throw new InvalidArgumentException('longPoll must be a finite number of seconds > 0');
        }
        $body = $this->acquireBody($base, $shared, $limit, $owner);
        $deadline = microtime(true) + $wait;
        $op = sprintf('acquire "%s"', $name);
        if ($fair) {
            $got = $this->post($name, $body + ['wait_ms' => $this->chunk($deadline), 'fair' => true], $op, $session);

            return $got instanceof Lease ? $got : $got->await(max(0.0, $deadline - microtime(true)));
        }
        for (;;) {
            try {
                $got = $this->post($name, $body + ['wait_ms' => $this->chunk($deadline)], $op, $session);
                if ($got instanceof Lease) {
                    return $got;
                }
                $got->cancel(); // a non-fair request never queues; should one, it leaves at once
                $detail = 'queued though not fair';
                throw new BatonException("$op: $detail", '', 202, $detail, null, null, null, $name);
            } catch (LockHeldException $e) {
                if (microtime(true) >= $deadline) {
                    throw $e;
                }
            }
        }
    }

    /**
     * @param array<string, mixed> $body
     */
    private function post(string $name, array $body, string $op, ?Session $session): Lease|Ticket
    {
        $wait = is_int($body['wait_ms'] ?? null) ? $body['wait_ms'] / 1000 : 0.0;
        $r = $this->transport->send('POST', self::lockPath($name), $body, $wait, $op, $name);

        return match ($r->status) {
            200, 201 => new Lease($this->transport, $r->body(), $session),
            202 => new Ticket($this->transport, $r->body(), $session, $this->longPoll),
            default => throw Problems::exception($r, $op, $name),
        };
    }

    /**
     * @param array<string, mixed> $base
     *
     * @return array<string, mixed>
     */
    private function acquireBody(array $base, bool $shared, ?int $limit, ?string $owner): array
    {
        $body = $base;
        if ($owner !== null) {
            $body['owner'] = $owner;
        }
        if ($shared) {
            $body['shared'] = true;
        }
        if ($limit !== null) {
            if (!$shared) {
                throw new InvalidArgumentException('limit needs shared: true (a limit counts shared holds)');
            }
            $body['limit'] = $limit;
        }

        return $body;
    }

    /**
     * The wait, in ms, of the next request towards $deadline.
     */
    private function chunk(float $deadline): int
    {
        return Duration::ms(max(0.0, min($deadline - microtime(true), $this->longPoll)), 'wait');
    }

    /**
     * Runs $fn($arg), then $cleanup, which also runs when $fn throws (its
     * errors then dropped in favour of $fn's) and when exit() is called
     * inside $fn.
     *
     * @template T
     *
     * @param callable(mixed): T $fn
     * @param \Closure(): mixed  $cleanup
     *
     * @return T
     */
    private static function scoped(callable $fn, object $arg, \Closure $cleanup): mixed
    {
        $guard = new Guard($cleanup);
        try {
            $result = $fn($arg);
        } catch (\Throwable $e) {
            $guard->disarm();
            self::quietly($cleanup);
            throw $e;
        }
        $guard->disarm();
        $cleanup();

        return $result;
    }

    private static function quietly(\Closure $f): void
    {
        try {
            $f();
        } catch (ExceptionInterface) {
        }
    }

    private static function lockPath(string $name): string
    {
        return '/v1/locks/' . (preg_match(self::NAME, $name) === 1 ? $name : rawurlencode($name));
    }

    /**
     * The lock name in a lease or ticket URL.
     */
    private static function nameIn(string $url, string $kind): string
    {
        if (preg_match('#^/v1/locks/([^/?]+)/' . $kind . '/[^/?]+$#', $url, $m) !== 1) {
            throw new InvalidArgumentException(
                sprintf('not a %s URL: expected /v1/locks/{name}/%s/{id}', rtrim($kind, 's'), $kind)
            );
        }

        return rawurldecode($m[1]);
    }

    private static function env(string $name): ?string
    {
        $v = getenv($name);

        return is_string($v) && $v !== '' ? $v : null;
    }

    /**
     * @return array<string, mixed>
     */
    public function __debugInfo(): array
    {
        return $this->transport->__debugInfo() + ['longPoll' => $this->longPoll];
    }

    /**
     * @return never
     */
    public function __serialize(): array
    {
        throw new \LogicException('a Baton client cannot be serialized; make a new one where it is needed');
    }
}
