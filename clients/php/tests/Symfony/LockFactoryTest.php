<?php

declare(strict_types=1);

namespace Baton\Tests\Symfony;

use Baton\Client;
use Baton\Symfony\BatonStore;
use Baton\Tests\Support\BatonTestCase;
use Symfony\Component\Lock\LockFactory;

/**
 * Symfony Lock's LockFactory over BatonStore, as an application uses it:
 * exclusive, shared and blocking locks.
 */
final class LockFactoryTest extends BatonTestCase
{
    private Client $client;
    private LockFactory $factory;

    protected function setUp(): void
    {
        parent::setUp();
        $this->client = new Client();
        $this->factory = new LockFactory(new BatonStore($this->client));
    }

    public function testExclusive(): void
    {
        $resource = $this->name();
        $lock = $this->factory->createLock($resource, 30.0);
        self::assertTrue($lock->acquire());
        self::assertTrue($lock->isAcquired());
        self::assertEqualsWithDelta(30.0, (float) $lock->getRemainingLifetime(), 1.0);
        $state = $this->client->state($resource);
        self::assertSame('exclusive', $state['mode']);
        self::assertEqualsWithDelta(30000, $state['ttl_ms'], 1000, 'the factory\'s TTL, not the store\'s initial one');

        $other = $this->factory->createLock($resource);
        self::assertFalse($other->acquire());
        self::assertFalse($other->isAcquired());

        $lock->refresh(60.0);
        self::assertGreaterThan(55000, $this->client->state($resource)['ttl_ms']);
        $lock->release();
        self::assertFalse($lock->isAcquired());
        self::assertTrue($other->acquire());
        $other->release();
    }

    public function testReleasedWhenTheLockObjectGoes(): void
    {
        $resource = $this->name();
        $lock = $this->factory->createLock($resource);
        self::assertTrue($lock->acquire());
        unset($lock); // autoRelease
        self::assertFalse($this->client->state($resource)['held']);

        $kept = $this->factory->createLock($resource, 30.0, false);
        $kept->acquire();
        unset($kept);
        self::assertTrue($this->client->state($resource)['held'], 'autoRelease: false keeps it');
    }

    public function testShared(): void
    {
        $resource = $this->name();
        [$r1, $r2, $w] = array_map(fn () => $this->factory->createLock($resource), [1, 2, 3]);
        self::assertTrue($r1->acquireRead());
        self::assertTrue($r2->acquireRead());
        self::assertSame(2, $this->client->state($resource)['holders']);
        self::assertFalse($w->acquire());
        $r1->release();
        $r2->release();
        self::assertTrue($w->acquire());
        self::assertFalse($r1->acquireRead());
        $w->release();
    }

    public function testBlocking(): void
    {
        $resource = $this->name();
        // The other process releases only once this one's blocking acquire
        // waits in the queue (it exits 4 if none ever does).
        $worker = $this->worker(['factory-hold', $resource, 'waited']);
        $worker->expect('acquired');
        $lock = $this->factory->createLock($resource);
        self::assertFalse($lock->acquire());
        self::assertTrue($lock->acquire(true));
        $worker->expect('released');
        self::assertSame(0, $worker->wait(), 'blocked until the other process released');

        // A blocking read waits for a writer, and readers do not wait for each other.
        $writer = $this->worker(['factory-hold', $resource, 'waited']);
        $lock->release();
        $writer->expect('acquired');
        $reader = $this->factory->createLock($resource);
        self::assertTrue($reader->acquireRead(true));
        $writer->expect('released');
        self::assertSame(0, $writer->wait(), 'the read waited for the writer');
        $otherReader = $this->worker(['factory-hold', $resource, '0', 'read']);
        $otherReader->expect('acquired');
        $otherReader->expect('released');
        self::assertSame(0, $otherReader->wait());
        $reader->release();
    }
}
