<?php

declare(strict_types=1);

namespace Baton;

use Baton\Exception\BatonException;
use Baton\Exception\LeaseLostException;
use Baton\Exception\LockHeldException;

/**
 * SimpleLock has the methods of the common PHP Redis lock class (the
 * `RedisLock` with lock/isLocking/expire/unlock/unlockAll found in many PHP
 * code bases), for a drop-in migration: swap the constructor, keep the calls.
 *
 * Each lock is a Baton lease of its own, so that expire() sets one hold's ttl
 * as the original does (holds in a Baton session share the session's ttl);
 * unlockAll() releases every lock this object holds.
 *
 * Unlike the original, a lock is not a Redis key anyone may delete: only this
 * object can release it (or an admin, by force), and every lease has a fence
 * (fence()). A busy lock is `false`, as before; Baton being unreachable or a
 * key being refused is an exception, never a silent `false`.
 */
final class SimpleLock
{
    /** @var array<string, Lease> the locks this object holds, by name */
    private array $held = [];

    /**
     * @param string|null $owner a label shown in each lock's state
     */
    public function __construct(private readonly Client $client, private readonly ?string $owner = null)
    {
    }

    /**
     * Takes the lock $name for $expire seconds, waiting up to $timeout seconds
     * for it (0: not at all). Returns false when it stayed busy; a lock this
     * object already holds is busy too, as in the original.
     *
     * @param int $waitIntervalUs accepted for compatibility and unused: Baton
     *                            wakes a waiter when the lock is released,
     *                            instead of polling
     *
     * @throws BatonException when Baton cannot be reached or refuses the key
     */
    public function lock(string $name, float $timeout = 0, float $expire = 15, int $waitIntervalUs = 100000): bool
    {
        try {
            $lease = $this->client->acquire($name, ttl: $expire, wait: max(0.0, $timeout), owner: $this->owner);
        } catch (LockHeldException) {
            return false;
        }
        $this->held[$name] = $lease;

        return true;
    }

    /**
     * Whether this object holds the lock $name (asking Baton: a hold that ran
     * out is not held).
     *
     * @throws BatonException when Baton cannot say
     */
    public function isLocking(string $name): bool
    {
        if (!isset($this->held[$name])) {
            return false;
        }
        if ($this->held[$name]->isHeld()) {
            return true;
        }
        unset($this->held[$name]);

        return false;
    }

    /**
     * Sets the ttl of the lock $name to $expire seconds from now (at least 1,
     * as in the original). False when this object does not hold it.
     *
     * @throws BatonException when Baton cannot be reached
     */
    public function expire(string $name, float $expire): bool
    {
        if (!isset($this->held[$name])) {
            return false;
        }
        try {
            $this->held[$name]->renew(max($expire, 1.0));

            return true;
        } catch (LeaseLostException) {
            unset($this->held[$name]);

            return false;
        }
    }

    /**
     * Releases the lock $name. False when this object did not hold it (or the
     * hold had already run out).
     *
     * @throws BatonException when Baton cannot be reached
     */
    public function unlock(string $name): bool
    {
        if (!isset($this->held[$name])) {
            return false;
        }
        try {
            $this->held[$name]->release();

            return true;
        } catch (LeaseLostException) {
            return false;
        } finally {
            if ($this->held[$name]->isReleased() || $this->held[$name]->isLost()) {
                unset($this->held[$name]);
            }
        }
    }

    /**
     * Releases every lock this object holds; returns how many it released
     * (those that had run out are not counted).
     *
     * @throws BatonException when Baton cannot be reached (the locks not yet
     *                        released stay with this object)
     */
    public function unlockAll(): int
    {
        $released = 0;
        foreach (array_keys($this->held) as $name) {
            if ($this->unlock((string) $name)) {
                $released++;
            }
        }

        return $released;
    }

    /**
     * The fence of the lock $name, when this object holds it.
     */
    public function fence(string $name): ?int
    {
        return isset($this->held[$name]) ? $this->held[$name]->fence : null;
    }

    /**
     * The names of the locks this object holds (by its last knowledge).
     *
     * @return list<string>
     */
    public function names(): array
    {
        return array_map('strval', array_keys($this->held));
    }
}
