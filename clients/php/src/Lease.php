<?php

declare(strict_types=1);

namespace Baton;

use Baton\Exception\BatonException;
use Baton\Exception\LeaseLostException;
use Baton\Internal\Duration;
use Baton\Internal\Problems;
use Baton\Internal\Transport;

/**
 * Lease is one hold on a lock: its fence, its URL, and the calls that renew
 * and release it.
 *
 * PHP runs no background thread, so nothing renews a lease by itself: call
 * renew() before the ttl runs out (or take the hold in a Session and renew
 * that). When Baton answers that the hold is gone (`404 lease-not-held`), the
 * lease is marked lost at once (isLost()), and every later call on it throws
 * LeaseLostException without asking the server again.
 */
final class Lease
{
    /** The lock's name. */
    public readonly string $name;

    /** The fencing token: pass it to what the lock protects, and have that reject lower ones. */
    public readonly int $fence;

    /**
     * The lease URL (`/v1/locks/{name}/leases/{lease}`, relative to the server).
     * A bearer secret: whoever has it (and the key that made it) may renew or
     * release the hold. Client::lease() takes it back in a later process.
     */
    public readonly string $url;

    /** Whether this is a shared hold. */
    public readonly bool $shared;

    /** A shared hold's limit (null for none, and for an exclusive hold). */
    public readonly ?int $limit;

    /** The owner label given when the lock was taken. */
    public readonly string $owner;

    private int $count;
    private float $ttl;
    private float $seenAt;
    private bool $lost = false;
    private bool $released = false;

    /**
     * @param array<string, mixed> $body a Lease body as Baton sends it
     *
     * @internal made by Client, Session and Ticket
     */
    public function __construct(
        private readonly Transport $transport,
        array $body,
        private readonly ?Session $session = null
    ) {
        $this->name = (string) ($body['name'] ?? '');
        $this->fence = (int) ($body['fence'] ?? 0);
        $this->url = (string) ($body['url'] ?? '');
        $this->shared = (bool) ($body['shared'] ?? false);
        $this->limit = is_int($body['limit'] ?? null) ? $body['limit'] : null;
        $this->owner = (string) ($body['owner'] ?? '');
        $this->update($body);
    }

    /**
     * The hold count (1, plus re-entries made elsewhere with this lease).
     */
    public function count(): int
    {
        return $this->count;
    }

    /**
     * The seconds left on the lease by the last answer, less the time passed
     * since (by this machine's clock; Baton's is authoritative).
     */
    public function ttl(): float
    {
        return max(0.0, $this->ttl - (microtime(true) - $this->seenAt));
    }

    /**
     * The session the hold belongs to, when it was taken in one.
     */
    public function session(): ?Session
    {
        return $this->session;
    }

    /**
     * Whether the hold is known to be lost: a call on it was answered
     * `404 lease-not-held`.
     */
    public function isLost(): bool
    {
        return $this->lost;
    }

    /**
     * Whether release() ended the hold.
     */
    public function isReleased(): bool
    {
        return $this->released;
    }

    /**
     * Asks Baton whether the hold is still held (and refreshes ttl()). A hold
     * that is gone is marked lost.
     *
     * @throws BatonException when Baton cannot say
     */
    public function isHeld(): bool
    {
        if ($this->lost || $this->released) {
            return false;
        }
        $r = $this->transport->send('GET', $this->url, null, 0.0, $this->op('check'), $this->name);
        if ($r->status === 200) {
            $this->update($r->body());

            return true;
        }
        if ($r->status === 404) {
            $this->lost = true;

            return false;
        }
        throw Problems::exception($r, $this->op('check'), $this->name);
    }

    /**
     * Renews the lease to $ttl seconds (null: the ttl of its last grant or
     * renewal). A lease that ran out is never revived.
     *
     * @throws LeaseLostException when the hold is gone (the lease is marked lost)
     * @throws BatonException     on any other failure
     */
    public function renew(?float $ttl = null): void
    {
        $this->ensureHeld('renew');
        $body = $ttl === null ? [] : ['ttl_ms' => Duration::ms($ttl, 'ttl')];
        $r = $this->transport->send('PATCH', $this->url, $body, 0.0, $this->op('renew'), $this->name);
        if ($r->status === 200) {
            $this->update($r->body());

            return;
        }
        throw $this->failure($r, 'renew');
    }

    /**
     * Releases one hold of the lease; returns true when that ended it (the
     * lock, or its slot, went to the next waiter). Releasing a released lease
     * does nothing and returns false.
     *
     * @throws LeaseLostException when the hold was already gone: whatever it
     *                            guarded was not guarded to the end
     * @throws BatonException     on any other failure
     */
    public function release(): bool
    {
        if ($this->released) {
            return false;
        }
        $this->ensureHeld('release');
        $r = $this->transport->send('DELETE', $this->url, null, 0.0, $this->op('release'), $this->name);
        if ($r->status === 200) {
            $body = $r->body();
            $this->count = (int) ($body['count'] ?? 0);
            $this->released = (bool) ($body['released'] ?? false);

            return $this->released;
        }
        if ($r->status === 404 && $r->attempts > 1) {
            // An earlier attempt whose answer was lost released it.
            $this->count = 0;
            $this->released = true;

            return true;
        }
        throw $this->failure($r, 'release');
    }

    /**
     * The lease's fields, for keeping it across processes (Client::restoreLease()
     * makes a Lease from them again without asking the server).
     *
     * @return array<string, mixed>
     */
    public function toArray(): array
    {
        return [
            'name' => $this->name,
            'url' => $this->url,
            'fence' => $this->fence,
            'count' => $this->count,
            'ttl_ms' => (int) round($this->ttl() * 1000),
            'owner' => $this->owner,
            'shared' => $this->shared,
            'limit' => $this->limit,
        ];
    }

    /**
     * @param array<string, mixed> $body
     */
    private function update(array $body): void
    {
        $this->count = (int) ($body['count'] ?? 1);
        $this->ttl = Duration::seconds($body['ttl_ms'] ?? null) ?? 0.0;
        $this->seenAt = microtime(true);
    }

    private function ensureHeld(string $what): void
    {
        if ($this->lost) {
            throw $this->lostException($what, 'the hold was lost earlier: Baton answered 404 lease-not-held');
        }
        if ($this->released) {
            throw $this->lostException($what, 'the hold was released');
        }
    }

    private function failure(Internal\Response $r, string $what): BatonException
    {
        $e = Problems::exception($r, $this->op($what), $this->name);
        if ($e instanceof LeaseLostException) {
            $this->lost = true;
        }

        return $e;
    }

    private function lostException(string $what, string $detail): LeaseLostException
    {
        return new LeaseLostException(
            sprintf('%s: %s (fence %d)', $this->op($what), $detail, $this->fence),
            '/problems/lease-not-held',
            404,
            $detail,
            null,
            null,
            null,
            $this->name
        );
    }

    private function op(string $what): string
    {
        return sprintf('%s "%s"', $what, $this->name);
    }

    /**
     * @return array<string, mixed>
     */
    public function __debugInfo(): array
    {
        return [
            'name' => $this->name,
            'fence' => $this->fence,
            'shared' => $this->shared,
            'limit' => $this->limit,
            'owner' => $this->owner,
            'count' => $this->count,
            'ttl' => $this->ttl(),
            'lost' => $this->lost,
            'released' => $this->released,
        ];
    }
}
