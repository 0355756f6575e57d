<?php

declare(strict_types=1);

namespace Baton;

use Baton\Exception\BatonException;
use Baton\Exception\LockHeldException;
use Baton\Exception\SessionNotFoundException;
use Baton\Internal\Duration;
use Baton\Internal\Problems;
use Baton\Internal\Transport;

/**
 * Session is many holds with one heartbeat: holds taken with acquire() last as
 * long as the session, one renew() renews them all, and close() releases them
 * all, whatever happened. A session that is not renewed ends after its ttl,
 * and its holds with it.
 *
 * Client::withSession() closes the session on every way out of a callable.
 */
final class Session
{
    /** The session URL (`/v1/sessions/{id}`): a bearer secret. */
    public readonly string $url;

    /** The owner label given when the session was made. */
    public readonly string $owner;

    private string $id;
    private float $ttl;
    private float $seenAt;
    private bool $closed = false;
    private bool $lost = false;

    /**
     * @param array<string, mixed> $body a Session body as Baton sends it
     *
     * @internal made by Client
     */
    public function __construct(private readonly Client $client, private readonly Transport $transport, array $body)
    {
        $this->id = (string) ($body['session'] ?? '');
        $this->url = (string) ($body['url'] ?? '');
        $this->owner = (string) ($body['owner'] ?? '');
        $this->update($body);
    }

    /**
     * Takes the lock $name into the session, like Client::acquire() but
     * without a ttl of its own: the hold lasts as long as the session.
     *
     * @throws LockHeldException        when not granted within $wait seconds
     * @throws SessionNotFoundException when the session is gone
     * @throws BatonException           on any other failure
     */
    public function acquire(
        string $name,
        float $wait = 10.0,
        bool $fair = false,
        bool $shared = false,
        ?int $limit = null,
        ?string $owner = null
    ): Lease {
        $this->ensureOpen('acquire');
        try {
            return $this->client->obtain($name, ['session' => $this->id], $wait, $fair, $shared, $limit, $owner, $this);
        } catch (SessionNotFoundException $e) {
            $this->lost = true;
            throw $e;
        }
    }

    /**
     * Renews the session and every hold in it to $ttl seconds (null: its last
     * ttl).
     *
     * @throws SessionNotFoundException when the session is gone (it is marked lost)
     * @throws BatonException           on any other failure
     */
    public function renew(?float $ttl = null): void
    {
        $this->ensureOpen('renew');
        $body = $ttl === null ? [] : ['ttl_ms' => Duration::ms($ttl, 'ttl')];
        $r = $this->transport->send('PATCH', $this->url, $body, 0.0, 'renew the session');
        if ($r->status === 200) {
            $this->update($r->body());

            return;
        }
        throw $this->failure($r, 'renew the session');
    }

    /**
     * The session's holds, as Baton lists them: each with `name`, `url` (its
     * lease URL), `fence`, `count` and `shared`.
     *
     * @return list<array<string, mixed>>
     *
     * @throws SessionNotFoundException when the session is gone
     * @throws BatonException           on any other failure
     */
    public function holds(): array
    {
        $this->ensureOpen('list the holds of');
        $r = $this->transport->send('GET', $this->url, null, 0.0, 'list the session\'s holds');
        if ($r->status !== 200) {
            throw $this->failure($r, 'list the session\'s holds');
        }
        $this->update($r->body());
        $holds = $r->body()['holds'] ?? [];

        return is_array($holds) ? array_values($holds) : [];
    }

    /**
     * Ends the session: every hold in it is released completely, and its
     * tickets cancelled. Returns the number of holds released; closing a
     * closed session returns 0.
     *
     * @throws SessionNotFoundException when the session had already ended on
     *                                  its own (its holds were lost with it)
     * @throws BatonException           on any other failure
     */
    public function close(): int
    {
        if ($this->closed) {
            return 0;
        }
        $this->ensureOpen('close');
        $r = $this->transport->send('DELETE', $this->url, null, 0.0, 'close the session');
        if ($r->status === 200) {
            $this->closed = true;

            return (int) ($r->body()['released'] ?? 0);
        }
        if ($r->status === 404 && $r->attempts > 1) {
            $this->closed = true; // an earlier attempt whose answer was lost closed it

            return 0;
        }
        throw $this->failure($r, 'close the session');
    }

    /**
     * The seconds left by the last answer, less the time passed since.
     */
    public function ttl(): float
    {
        return max(0.0, $this->ttl - (microtime(true) - $this->seenAt));
    }

    public function isClosed(): bool
    {
        return $this->closed;
    }

    /**
     * Whether the session is known to have ended on its own (an answer was
     * `404 session-not-found`).
     */
    public function isLost(): bool
    {
        return $this->lost;
    }

    /**
     * @param array<string, mixed> $body
     */
    private function update(array $body): void
    {
        $this->ttl = Duration::seconds($body['ttl_ms'] ?? null) ?? 0.0;
        $this->seenAt = microtime(true);
    }

    private function ensureOpen(string $what): void
    {
        if ($this->closed || $this->lost) {
            $detail = $this->closed
                ? 'the session was closed'
                : 'the session ended earlier: Baton answered 404 session-not-found';
            throw new SessionNotFoundException(
                sprintf('%s: %s', $what === 'acquire' ? 'acquire in the session' : $what . ' the session', $detail),
                '/problems/session-not-found',
                404,
                $detail
            );
        }
    }

    private function failure(Internal\Response $r, string $op): BatonException
    {
        $e = Problems::exception($r, $op, null);
        if ($e instanceof SessionNotFoundException) {
            $this->lost = true;
        }

        return $e;
    }

    /**
     * @return array<string, mixed>
     */
    public function __debugInfo(): array
    {
        return ['owner' => $this->owner, 'ttl' => $this->ttl(), 'closed' => $this->closed, 'lost' => $this->lost];
    }
}
