<?php

declare(strict_types=1);

namespace Baton\Tests\Symfony\StoreCases;

use Symfony\Component\Lock\Exception\LockExpiredException;
use Symfony\Component\Lock\Key;

/**
 * The cases of Symfony Lock's ExpiringStoreTestTrait, written again here (see
 * AbstractStoreTestCase): a store whose locks end by themselves.
 */
trait ExpiringStoreTestTrait
{
    /**
     * Microseconds that order what happens in these cases: small enough to
     * keep them quick, large enough for the store to keep time within.
     */
    abstract protected function getClockDelay(): int;

    public function testExpiration(): void
    {
        $store = $this->getStore();
        $key = new Key($this->resource());
        $delay = $this->getClockDelay();

        $store->save($key);
        $store->putOffExpiration($key, 2 * $delay / 1e6);
        self::assertTrue($store->exists($key));
        usleep(3 * $delay); // the lock ends by itself: waiting is the test
        self::assertFalse($store->exists($key));
    }

    public function testAbortAfterExpiration(): void
    {
        $store = $this->getStore();
        $key = new Key($this->resource());

        $store->save($key);
        $this->expectException(LockExpiredException::class);
        $store->putOffExpiration($key, 1 / 1e6); // gone before the answer could come
    }

    public function testRefreshLock(): void
    {
        $store = $this->getStore();
        $key = new Key($this->resource());
        $delay = $this->getClockDelay();

        $store->save($key);
        $store->putOffExpiration($key, 2 * $delay / 1e6); // shortens the initial TTL
        self::assertTrue($store->exists($key));
        usleep(3 * $delay);
        self::assertFalse($store->exists($key));
    }

    public function testSetExpiration(): void
    {
        $store = $this->getStore();
        $key = new Key($this->resource());

        $store->save($key);
        $store->putOffExpiration($key, 1.0);
        $left = $key->getRemainingLifetime();
        self::assertNotNull($left);
        self::assertGreaterThanOrEqual(0.0, $left);
        self::assertLessThanOrEqual(1.0, $left);
        $store->delete($key);
    }

    public function testExpiredLockCleaned(): void
    {
        $store = $this->getStore();
        $resource = $this->resource();
        [$expired, $fresh] = [new Key($resource), new Key($resource)];

        $expired->reduceLifetime(0);
        self::assertTrue($expired->isExpired());
        try {
            $store->save($expired);
            self::fail('an expired key was saved');
        } catch (LockExpiredException) {
        }
        self::assertFalse($store->exists($expired));

        $store->save($fresh); // nothing of the expired key stands in the way
        self::assertTrue($store->exists($fresh));
        $store->delete($fresh);
    }
}
