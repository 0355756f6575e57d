<?php

declare(strict_types=1);

namespace Baton\Symfony;

use Baton\Client;
use Baton\Exception\BatonException;
use Baton\Exception\InvalidRequestException;
use Baton\Exception\LeaseLostException;
use Baton\Exception\LimitMismatchException;
use Baton\Exception\LockHeldException;
use Baton\Lease;
use Baton\Ticket;
use Symfony\Component\Lock\BlockingSharedLockStoreInterface;
use Symfony\Component\Lock\BlockingStoreInterface;
use Symfony\Component\Lock\Exception\InvalidTtlException;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Exception\LockReleasingException;
use Symfony\Component\Lock\Exception\LockStorageException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\PersistingStoreInterface;
use Symfony\Component\Lock\SharedLockStoreInterface;
use Symfony\Component\Lock\Store\ExpiringStoreTrait;

/**
 * BatonStore keeps Symfony Lock's locks in Baton:
 *
 *     $factory = new LockFactory(new BatonStore(new Baton\Client()));
 *     $lock = $factory->createLock('invoices');
 *     $lock->acquire(true);          // blocking: waits in Baton's fair queue
 *     $lock->acquireRead();          // shared
 *
 * Each key's hold is a Baton lease, kept in the Key's state (the lease's URL
 * and fields, no connection), so a serialized Key may be released or
 * refreshed by another process with a client of the same API key.
 *
 * Resource names that are valid Baton lock names (`[A-Za-z0-9._:-]{1,200}`
 * after the prefix) are used as they are, so API key grants and the lock's
 * state match what the application calls them; any other resource becomes
 * its valid characters (others as `_`, at most 100), a dot, and 32 hex
 * digits of its SHA-256.
 *
 * Baton has no upgrade or downgrade of a hold; this store makes one from the
 * fair queue. save() on a key with a shared hold queues an exclusive ticket
 * and, when that ticket is first and the key's hold is the only one, releases
 * the shared hold: the same Redis script hands the lock to the ticket, so
 * nobody gets in between. Otherwise it is a conflict and the shared hold
 * stays. waitAndSave() on such a key gives the shared hold up while it waits
 * (first in line), instead of deadlocking with another reader doing the same.
 * saveRead() on a key with the exclusive hold turns it shared the same way
 * when nobody is queued, and else keeps the exclusive hold, which guards
 * reading too.
 */
final class BatonStore implements
    PersistingStoreInterface,
    BlockingStoreInterface,
    SharedLockStoreInterface,
    BlockingSharedLockStoreInterface
{
    use ExpiringStoreTrait;

    private const STATE = self::class;
    private const NAME = '/^[A-Za-z0-9._:-]{1,200}$/';

    /**
     * @param float  $initialTtl seconds a hold lasts after save(), until Lock::refresh() says otherwise
     * @param bool   $fair       whether blocking waits queue first-come first-served (Baton's fair queue)
     * @param string $prefix     put before every resource name, e.g. `billing:` to match a key's grants
     */
    public function __construct(
        private readonly Client $client,
        private readonly float $initialTtl = 300.0,
        private readonly bool $fair = true,
        private readonly string $prefix = ''
    ) {
        if (!($initialTtl > 0)) {
            throw new InvalidTtlException(
                sprintf('"%s()" expects a strictly positive TTL, got %s.', __METHOD__, var_export($initialTtl, true))
            );
        }
    }

    /**
     * Takes the exclusive hold of $key's resource, or renews the one $key has.
     */
    public function save(Key $key): void
    {
        $key->reduceLifetime($this->initialTtl);
        $this->checkNotExpired($key);
        $this->guard($key, 'acquire', fn () => $this->take($key, false, false));
        $this->checkNotExpired($key);
    }

    /**
     * Takes a shared hold of $key's resource, or renews the one $key has.
     */
    public function saveRead(Key $key): void
    {
        $key->reduceLifetime($this->initialTtl);
        $this->checkNotExpired($key);
        $this->guard($key, 'acquire', fn () => $this->take($key, true, false));
        $this->checkNotExpired($key);
    }

    /**
     * Waits as long as it takes for the exclusive hold.
     */
    public function waitAndSave(Key $key): void
    {
        $this->guard($key, 'acquire', fn () => $this->take($key, false, true));
        $key->reduceLifetime($this->initialTtl);
        $this->checkNotExpired($key);
    }

    /**
     * Waits as long as it takes for a shared hold.
     */
    public function waitAndSaveRead(Key $key): void
    {
        $this->guard($key, 'acquire', fn () => $this->take($key, true, true));
        $key->reduceLifetime($this->initialTtl);
        $this->checkNotExpired($key);
    }

    /**
     * Renews $key's hold to $ttl seconds.
     */
    public function putOffExpiration(Key $key, float $ttl): void
    {
        $lease = $this->lease($key);
        if ($lease === null) {
            throw new LockConflictedException(sprintf('The "%s" lock is not held by this key.', $key));
        }
        $key->reduceLifetime($ttl);
        $this->checkNotExpired($key);
        try {
            $lease->renew($ttl);
            $this->remember($key, $lease);
        } catch (LeaseLostException $e) {
            $key->removeState(self::STATE);
            throw new LockConflictedException(sprintf('The "%s" lock was lost: %s', $key, $e->getMessage()), 0, $e);
        } catch (InvalidRequestException $e) {
            $this->checkNotExpired($key);
            if (isset($e->errors()['ttl_ms'])) {
                $why = sprintf('Baton refused the TTL %s s for the "%s" lock: %s', $ttl, $key, $e->errors()['ttl_ms']);
                throw new InvalidTtlException($why, 0, $e);
            }
            throw self::storageError('renew', $key, $e);
        } catch (BatonException $e) {
            throw self::storageError('renew', $key, $e);
        }
        $this->checkNotExpired($key);
    }

    /**
     * Releases $key's hold, if it has one.
     */
    public function delete(Key $key): void
    {
        $lease = $this->lease($key);
        if ($lease === null) {
            return;
        }
        try {
            self::end($lease);
        } catch (BatonException $e) {
            $why = sprintf('Baton could not release the "%s" lock: %s', $key, $e->getMessage());
            throw new LockReleasingException($why, 0, $e);
        }
        $key->removeState(self::STATE);
    }

    /**
     * Whether $key's hold is still held (asks Baton).
     */
    public function exists(Key $key): bool
    {
        $lease = $this->lease($key);
        if ($lease === null) {
            return false;
        }
        try {
            return $lease->isHeld();
        } catch (BatonException $e) {
            throw self::storageError('check', $key, $e);
        }
    }

    /**
     * The Baton lock name for $key's resource.
     */
    public function name(Key $key): string
    {
        $resource = (string) $key;
        $name = $this->prefix . $resource;
        if (preg_match(self::NAME, $name) === 1 && $name !== '.' && $name !== '..') {
            return $name;
        }
        $safe = (string) preg_replace('/[^A-Za-z0-9._:-]+/', '_', $resource);

        return $this->prefix . substr($safe, 0, 100) . '.' . substr(hash('sha256', $resource), 0, 32);
    }

    /**
     * Takes (or keeps) the hold of the mode asked for.
     */
    private function take(Key $key, bool $shared, bool $blocking): void
    {
        $held = $this->lease($key);
        if ($held !== null && $held->shared === $shared) {
            try {
                $held->renew($this->initialTtl);
                $this->remember($key, $held);

                return;
            } catch (LeaseLostException) {
                $key->removeState(self::STATE); // ran out meanwhile: take it anew
                $held = null;
            }
        }
        if ($held !== null) {
            $shared ? $this->demote($key, $held) : $this->promote($key, $held, $blocking);

            return;
        }
        $lease = $this->client->acquire(
            $this->name($key),
            ttl: $this->initialTtl,
            wait: $blocking ? INF : 0.0,
            fair: $blocking && $this->fair,
            shared: $shared
        );
        $this->remember($key, $lease);
    }

    /**
     * Turns $key's shared hold exclusive (see the class comment).
     */
    private function promote(Key $key, Lease $reader, bool $blocking): void
    {
        $got = $this->client->enqueue($reader->name, ttl: $this->initialTtl);
        if ($got instanceof Lease) { // the shared hold had ended already
            $this->remember($key, $got);

            return;
        }
        if (!$blocking && !($got->position() === 1 && $this->holders($reader->name) === 1)) {
            $got->cancel();
            throw new LockConflictedException(
                sprintf('The "%s" lock has other readers or waiters; its read lock stays.', $key)
            );
        }
        $this->handOver($key, $reader, $got, $blocking ? INF : 5.0);
    }

    /**
     * Turns $key's exclusive hold shared (see the class comment).
     */
    private function demote(Key $key, Lease $writer): void
    {
        $got = $this->client->enqueue($writer->name, ttl: $this->initialTtl, shared: true);
        if ($got instanceof Lease) { // the exclusive hold had ended already
            $this->remember($key, $got);

            return;
        }
        if ($got->position() !== 1) {
            $got->cancel();
            $writer->renew($this->initialTtl); // others are queued: the exclusive hold guards reading as well
            $this->remember($key, $writer);

            return;
        }
        $this->handOver($key, $writer, $got, 5.0);
    }

    /**
     * Ends $from, whose end hands the lock to $to, first in the queue.
     */
    private function handOver(Key $key, Lease $from, Ticket $to, float $wait): void
    {
        try {
            self::end($from);
        } catch (LeaseLostException) {
        } catch (BatonException $e) {
            $to->cancel();
            throw $e;
        }
        $key->removeState(self::STATE);
        $this->remember($key, $to->await($wait));
    }

    private function holders(string $name): int
    {
        try {
            return (int) ($this->client->state($name)['holders'] ?? 0);
        } catch (BatonException) {
            return -1; // cannot tell (e.g. a key without read): not alone
        }
    }

    /**
     * Runs $f, turning Baton's errors into Symfony Lock's.
     */
    private function guard(Key $key, string $what, \Closure $f): void
    {
        try {
            $f();
        } catch (LockHeldException | LimitMismatchException $e) {
            throw new LockConflictedException(sprintf('The "%s" lock is held: %s', $key, $e->getMessage()), 0, $e);
        } catch (BatonException $e) {
            throw self::storageError($what, $key, $e);
        }
    }

    private static function storageError(string $what, Key $key, BatonException $e): LockStorageException
    {
        $why = sprintf('Baton could not %s the "%s" lock: %s', $what, $key, $e->getMessage());

        return new LockStorageException($why, 0, $e);
    }

    private function lease(Key $key): ?Lease
    {
        if (!$key->hasState(self::STATE)) {
            return null;
        }
        $fields = $key->getState(self::STATE);

        return is_array($fields) ? $this->client->restoreLease($fields) : null;
    }

    private function remember(Key $key, Lease $lease): void
    {
        $key->setState(self::STATE, $lease->toArray());
    }

    /**
     * Releases every count of $lease.
     */
    private static function end(Lease $lease): void
    {
        for ($i = 0; $i < 1000 && !$lease->isReleased(); $i++) {
            try {
                $lease->release();
            } catch (LeaseLostException) {
                return;
            }
        }
    }
}
