<?php

declare(strict_types=1);

namespace Baton\Tests\Symfony\StoreCases;

use Baton\Tests\Support\BatonTestCase;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\PersistingStoreInterface;

/**
 * The cases every store of Symfony Lock must pass (its AbstractStoreTestCase),
 * written again here: Debian's php-symfony-lock ships no tests. Each case
 * keeps Symfony's name and checks the same behaviour.
 */
abstract class AbstractStoreTestCase extends BatonTestCase
{
    abstract protected function getStore(): PersistingStoreInterface;

    /**
     * A resource name of this case's own, like Symfony's (class::method, so
     * with backslashes), made unique per run.
     */
    protected function resource(string $suffix = ''): string
    {
        static $run = null;
        $run ??= bin2hex(random_bytes(3));

        return static::class . '::' . $this->getName(false) . $suffix . '@' . $run;
    }

    public function testSave(): void
    {
        $store = $this->getStore();
        $key = new Key($this->resource());

        self::assertFalse($store->exists($key), 'before save');
        $store->save($key);
        self::assertTrue($store->exists($key), 'after save');
        $store->delete($key);
        self::assertFalse($store->exists($key), 'after delete');
    }

    public function testSaveWithDifferentResources(): void
    {
        $store = $this->getStore();
        [$one, $two] = [new Key($this->resource('1')), new Key($this->resource('2'))];

        $steps = [
            // [what to do, the key, then: one exists?, two exists?]
            ['save', $one, true, false],
            ['save', $two, true, true],
            ['delete', $one, false, true],
            ['delete', $two, false, false],
        ];
        foreach ($steps as $i => [$do, $key, $oneExists, $twoExists]) {
            $store->$do($key);
            $exist = [$store->exists($one), $store->exists($two)];
            self::assertSame([$oneExists, $twoExists], $exist, "after step $i ($do)");
        }
    }

    public function testSaveWithDifferentKeysOnSameResources(): void
    {
        $store = $this->getStore();
        $resource = $this->resource();
        [$one, $two] = [new Key($resource), new Key($resource)];

        $store->save($one);
        self::assertSame([true, false], [$store->exists($one), $store->exists($two)]);
        try {
            $store->save($two);
            self::fail('a second key saved a resource the first one holds');
        } catch (LockConflictedException) {
        }
        self::assertSame([true, false], [$store->exists($one), $store->exists($two)], 'the refusal changed nothing');

        $store->delete($one);
        self::assertSame([false, false], [$store->exists($one), $store->exists($two)]);
        $store->save($two);
        self::assertSame([false, true], [$store->exists($one), $store->exists($two)]);
        $store->delete($two);
        self::assertSame([false, false], [$store->exists($one), $store->exists($two)]);
    }

    public function testSaveTwice(): void
    {
        $store = $this->getStore();
        $key = new Key($this->resource());

        $store->save($key);
        $store->save($key); // saving again what one holds is no conflict
        self::assertTrue($store->exists($key));
        $store->delete($key);
        self::assertFalse($store->exists($key), 'one delete ends it, however often it was saved');
    }

    public function testDeleteIsolated(): void
    {
        $store = $this->getStore();
        [$one, $two] = [new Key($this->resource('1')), new Key($this->resource('2'))];

        $store->save($one);
        $store->delete($two); // never saved: nothing to delete, and nothing else touched
        self::assertSame([true, false], [$store->exists($one), $store->exists($two)]);
        $store->delete($one);
    }
}
